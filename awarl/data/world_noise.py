"""The search tool's noise in world v2: silent conflicting passages and visible failures.

A world v2 (`awarl.data.world`) writes ``noise.json`` beside its corpus: for each record id, the
probability ``silent`` (f) that a rollout's searches return its country passages corrupted, the
conflicting text each of those passages then shows, and the passages a *visible* failure leaves
out of a result. The rollout settings name the file (``RolloutSettings.world_noise``), so
capability p_i, GRPO and evaluation run the same tool; `awarl.agent.env.SearchEnv` applies it
with `RolloutNoise`.

- Silent noise is drawn once per (record id, rollout seed): in a noisy rollout every search that
  returns one of the question's country passages shows the conflicting text instead, under the
  same id and title, so repeating or rephrasing the query does not escape it and nothing in the
  result says so (a stale or corrupted index entry). No reader can beat it: it lowers the ceiling
  u_q by the factor 1 - f.
- A visible failure is drawn per call (record id, rollout seed, call number): with probability
  ``visible_failure`` the call's result leaves the question's country passages out. One call
  cannot tell that from a missing fact; a retry within the search budget usually can, so lazy
  refusal is not free.
- Tie order (``tie_order: rollout``, a world knob, off by default): passages that tie in a result (a
  name's namesakes, whose passages score alike) come in an order drawn per (record id, rollout seed, passage
  id), the same on every call of the rollout. With the index's order a reader that follows the first
  namesake shown is right on a question in every rollout or in none; with this one it is right in j/m of
  them, so its p_i on the question is its ceiling u_q.
- City names (``city_names: rollout``, a world knob, off by default): the tool shows every city under a name
  drawn per (record id, rollout seed), a permutation of the world's city names, the same on every call of the
  rollout; a query naming a shown name searches the city it stands for. A near-miss pair (a city and its
  one-letter variant, the city's name plus "s") keeps that form. Ids, countries and persons keep theirs, so
  answers and citations score as before. Without it a policy trained on one split's questions can tie what it
  learned (when to abstain) to that split's city names, which a held-out split never shows.

Draws are hashes (SHA-256) of their keys (the city names: Python's ``random`` seeded by the string of
the key, which hashes it with SHA-512), so they do not depend on the process, the order of the rollouts
or Python's hash seed. A record the table does not list (real data, a chatbot question)
gets the index's results unchanged: the chatbot serves without noise.

    >>> table = NoiseTable(0.5, {"q1": QuestionNoise(1.0, {"d1": "Tavok is a city in the country Ruvia."}, ("d1",))})
    >>> RolloutNoise(table, "q1", 0).silent, RolloutNoise(table, "other", 0).silent
    (True, False)
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from awarl.errors import ConfigError

NOISE_FILE = "noise.json"
TIE_ORDERS = ("index", "rollout")  # the order of passages of equal score: the index's, or drawn per rollout
CITY_NAMES = ("world", "rollout")  # a city's name in search results: its own, or drawn per rollout


class NoiseFileError(ConfigError):
    """A noise.json that cannot be read; the message names the file and the field (a `ConfigError`: the
    rollout settings name the file, so the fix is there)."""


def draw(*key: object) -> float:
    """A uniform number in [0, 1) fixed by ``key`` (the same in every process)."""
    digest = hashlib.sha256("\x1f".join(map(str, key)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


@dataclass(frozen=True)
class QuestionNoise:
    """The search noise of one question."""

    silent: float  # f: probability per rollout that its country passages come back with the conflicting text
    swap: dict[str, str]  # passage id -> the conflicting text it shows in a noisy rollout
    fragile: tuple[str, ...]  # passage ids a visible failure leaves out of a result


@dataclass(frozen=True)
class NoiseTable:
    """Every question's search noise, and the probability of a visible failure per call."""

    visible_failure: float
    questions: dict[str, QuestionNoise]
    tie_order: str = "index"  # "rollout": tied passages of a listed question in an order drawn per rollout
    cities: tuple[str, ...] = ()  # the names a listed question's rollouts permute (none: every city keeps its name)

    @classmethod
    def from_world(cls, world: Any) -> "NoiseTable":
        cities = sorted(world.cities())
        return cls(world.config.visible_failure,
                   {rid: QuestionNoise(spec["silent"], dict(spec["swap"]), tuple(spec["fragile"]))
                    for rid, spec in world.noise.items()}, world.config.tie_order,
                   tuple(cities) if world.config.city_names == "rollout" else ())

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"visible_failure": self.visible_failure,
                               "questions": {rid: {"silent": q.silent, "swap": q.swap, "fragile": list(q.fragile)}
                                             for rid, q in self.questions.items()}}
        if self.tie_order != "index":  # only when set: files written before the field existed read the same
            out["tie_order"] = self.tie_order
        if self.cities:
            out["cities"] = list(self.cities)
        return out

    @cached_property
    def name_classes(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The cities a rollout renames, as (plain cities, near-miss bases): a base's one-letter variant (its
        name plus "s") follows the base's new name, so the pair stays one letter apart."""
        names = set(self.cities)
        bases = tuple(sorted(c for c in names if c + "s" in names))
        variants = {b + "s" for b in bases}
        return tuple(sorted(names - set(bases) - variants)), bases

    @cached_property
    def name_pattern(self) -> re.Pattern[str] | None:
        """One regular expression matching any city name as a whole word (longest first)."""
        return re.compile(r"\b(" + self._alternatives + r")\b") if self.cities else None

    @cached_property
    def query_pattern(self) -> re.Pattern[str] | None:
        """A city name in a query as the index reads it: in any case, with or without a trailing "s" (the
        index lower-cases and stems), so every spelling that finds a city by its name finds it by a shown one."""
        return re.compile(r"\b(" + self._alternatives + r")(s?)\b", re.IGNORECASE) if self.cities else None

    @cached_property
    def _alternatives(self) -> str:
        return "|".join(re.escape(c) for c in sorted(self.cities, key=len, reverse=True))  # longest first

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path) -> "NoiseTable":
        """Read a noise.json; a missing file or a bad field is a `NoiseFileError` naming it."""
        path = Path(path)
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise NoiseFileError(f"{path}: no such noise file (a world v2 folder holds {NOISE_FILE}; "
                                 f"set rollout.world_noise (--world-noise) to it, or to null for no noise)") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise NoiseFileError(f"{path}: not valid JSON ({exc})") from None
        try:
            v = float(raw["visible_failure"])
            questions = {str(rid): QuestionNoise(float(q["silent"]), {str(k): str(t) for k, t in q["swap"].items()},
                                                 tuple(str(x) for x in q["fragile"]))
                         for rid, q in raw["questions"].items()}
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise NoiseFileError(f"{path}: expected {{visible_failure, questions: {{id: {{silent, swap, fragile}}}}}} "
                                 f"({type(exc).__name__}: {exc})") from None
        bad = [rid for rid, q in questions.items() if not 0.0 <= q.silent <= 1.0]
        if not 0.0 <= v <= 1.0 or bad:
            raise NoiseFileError(f"{path}: probabilities must be in [0, 1] (visible_failure {v}, silent of {bad[:3]})")
        order = raw.get("tie_order", "index")
        if order not in TIE_ORDERS:
            raise NoiseFileError(f"{path}: tie_order must be one of {', '.join(TIE_ORDERS)}, got {order!r}")
        cities = raw.get("cities", [])
        if not isinstance(cities, list) or not all(isinstance(c, str) and re.fullmatch(r"\w+", c) for c in cities):
            raise NoiseFileError(f"{path}: cities must be a list of one-word city names, got {str(cities)[:80]}")
        return cls(v, questions, order, tuple(cities))


@lru_cache(maxsize=4)
def load_noise(path: str) -> NoiseTable:
    """`NoiseTable.load`, once per path and process (every environment of a run shares it)."""
    return NoiseTable.load(path)


class RolloutNoise:
    """One rollout's draws: whether its question's country passages are corrupted, and which calls fail."""

    def __init__(self, table: NoiseTable, record_id: str | None, rollout_seed: int) -> None:
        self.record_id = str(record_id)
        self.rollout_seed = int(rollout_seed)
        self.visible_failure = table.visible_failure
        self.tie_order = table.tie_order
        self.spec = table.questions.get(self.record_id)
        self.silent = self.spec is not None and draw(self.record_id, self.rollout_seed, "silent") < self.spec.silent
        self.calls = 0
        self.failed_calls: list[int] = []
        self.names = self._draw_names(table) if self.spec is not None and table.cities else {}
        self._pattern = table.name_pattern
        self._query_pattern = table.query_pattern
        self._world_names = {shown.casefold(): name for name, shown in self.names.items()}

    def _draw_names(self, table: NoiseTable) -> dict[str, str]:
        """This rollout's city names: world name -> shown name (a permutation within each class of
        `NoiseTable.name_classes`), seeded by (record id, rollout seed) alone."""
        rng = random.Random(f"{self.record_id}\x1f{self.rollout_seed}\x1fnames")  # a str seed: the same in every process
        plain, bases = table.name_classes
        names = dict(zip(plain, rng.sample(plain, len(plain))))
        for base, shown in zip(bases, rng.sample(bases, len(bases))):
            names[base], names[base + "s"] = shown, shown + "s"
        return names

    def world_query(self, query: str) -> str:
        """The query the index searches: each city name this rollout shows, in any case and with or without a
        trailing "s", replaced by the city it stands for."""
        if not self.names:
            return query
        return self._query_pattern.sub(lambda m: self._world_names[m.group(1).casefold()] + m.group(2), query)

    def shown(self, text: str) -> str:
        """``text`` with each city under the name this rollout shows for it."""
        if not self.names:
            return text
        return self._pattern.sub(lambda m: self.names.get(m.group(1), m.group(1)), text)

    def apply(self, hits: Sequence[Any]) -> list[Any]:
        """The result this call shows: ``hits`` (each with ``.passage`` and ``.score``) less the question's
        country passages when the call fails visibly, with their conflicting text when the rollout is noisy,
        tied passages in this rollout's order when the table's ``tie_order`` is ``rollout``, and every city under
        this rollout's name for it when the table lists ``cities``."""
        call, self.calls = self.calls, self.calls + 1
        if self.spec is None:
            return list(hits)
        out = list(hits)
        if self.spec.fragile and draw(self.record_id, self.rollout_seed, "call", call) < self.visible_failure:
            kept = [h for h in out if h.passage.id not in self.spec.fragile]
            if len(kept) < len(out):
                self.failed_calls.append(call)
            out = kept
        if self.silent:
            out = [dataclasses.replace(h, passage=dataclasses.replace(h.passage, text=self.spec.swap[h.passage.id]))
                   if h.passage.id in self.spec.swap else h for h in out]
        if self.tie_order == "rollout":
            out = self._ties_in_rollout_order(out)
        if self.names:
            out = [dataclasses.replace(h, passage=dataclasses.replace(h.passage, title=self.shown(h.passage.title),
                                                                      text=self.shown(h.passage.text))) for h in out]
        return out

    def _ties_in_rollout_order(self, hits: list[Any]) -> list[Any]:
        """Each run of equal scores sorted by a draw keyed by this rollout and the passage id: a fixed
        order within the rollout, an independent one in every other; the runs keep their places."""
        def key(h: Any) -> float:
            return draw(self.record_id, self.rollout_seed, "order", h.passage.id)

        return [h for _, run in itertools.groupby(hits, key=lambda h: h.score) for h in sorted(run, key=key)]


__all__ = ["CITY_NAMES", "NOISE_FILE", "TIE_ORDERS", "NoiseFileError", "NoiseTable", "QuestionNoise", "RolloutNoise", "draw",
           "load_noise"]
