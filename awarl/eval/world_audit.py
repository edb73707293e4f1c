"""The preconditions of a world, checked without training (`scripts/world_audit.py`).

A world is a fair test of AWA-RL only if nothing cheap solves its held-out split and its ceilings
are what world.json says. Each check runs the real search tool: the BM25 index the pipeline
builds over the world's corpus and `SearchEnv` with the world's noise (``world_noise``), so what
is measured is what p_i, GRPO and evaluation see. Checks (the study's bounds, recorded in
docs/fidelity.md, World v2):

- ``lookup``: a table from the SFT questions (first-hop city -> SFT answer, else the commonest SFT
  country) is right on at most 0.15 of the held-out questions (the same table abstaining on cities
  it never saw is shown beside it: that is the always-abstain baseline, the unanswerable share);
- ``shape rule``: "the first search's rank-1 passage names a city; if rank 1 of 'country <city>' is a
  country passage the question is answerable" tells unanswerable from answerable at a balanced
  accuracy of at most 0.75 (averaged over ``seeds`` rollout seeds);
- ``oracle``: a reader that follows a namesake shown by the real first search at random and retries
  within the budget reaches, in expectation, exactly mean(u) on the answerable questions;
- ``mean(u)`` in [0.4, 0.6], at least 25% of answerable questions at u <= 0.2 and 25% at u >= 0.6;
- ``rank rule``: following the namesake at a fixed rank r of the results (the best r) reaches at
  most mean(u) + 0.05 (the gold namesake's rank carries no cue);
- ``middle share`` (context for the base's spread bound, >= 20% of answerable questions at p_i in
  (0.2, 0.5)): the share of answerable questions whose p_i lies there, in expectation, for the reader
  that picks a shown namesake at random in every rollout (its p_i is its expected accuracy on the question)
  and for a *consistent* reader,
  which follows one shown namesake, the same in every rollout (what a trained reader does: its p_i on a
  question is 0 or (1 - f) times the retry's success, never j/m, and only its mean over a kind is u), and
  for the reader that follows the first namesake shown (the same as the consistent one with the index's tie
  order; with ``tie_order: rollout`` the order of tied passages is drawn per rollout and its p_i is u_q);
- ``coverage``: every word of a held-out entity (names, cities, variants) appears in the SFT
  conversations, and no held-out bridge city is an SFT one.

Imports bm25s (through `awarl.search.bm25`) when run, never torch.
"""

from __future__ import annotations

import re
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from awarl.data.world import World, gold_conversation, gold_queries, record_id, write_world
from awarl.errors import ConfigError
from awarl.protocol import ABSTAIN_PHRASE, parse_results

_LINK = re.compile(r"^(\w+) is a city in the country (\w+)\.$")
_PERSON = re.compile(r" (?:was born in|lives in|visited) (\w+)\b")
MIDDLE = (0.2, 0.5)  # a base's middle band of p_i (the study's bound: >= 20% of its answerable questions in it)


@dataclass(frozen=True)
class Check:
    """One precondition: its value, its bound and whether the value meets it."""

    name: str
    value: float
    bound: str
    ok: bool
    note: str = ""


@dataclass
class Audit:
    """The checks of one world on one split."""

    split: str
    questions: int
    answerable: int
    checks: list[Check] = field(default_factory=list)
    oracle: list["OraclePoint"] = field(default_factory=list)  # the AWA oracle's bounds (audit_recipe)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)

    def table(self) -> str:
        """A Markdown table (what docs/fidelity.md records)."""
        rows = ["| check | value | bound | ok | what it measures |", "|---|---|---|---|---|"]
        rows += [f"| {c.name} | {c.value:.3f} | {c.bound} | {'yes' if c.ok else '**no**'} | {c.note} |"
                 for c in self.checks]
        return "\n".join(rows)

    def to_dict(self) -> dict[str, Any]:
        return {"split": self.split, "questions": self.questions, "answerable": self.answerable, "ok": self.ok,
                "checks": [asdict(c) for c in self.checks], "oracle": [asdict(o) for o in self.oracle]}

    def oracle_table(self) -> str:
        rows = ["| γ | oracle refusal | oracle precision | oracle accuracy |", "|---|---|---|---|"]
        return "\n".join(rows + [f"| {o.gamma:g} | {o.refusal:.3f} | {o.precision:.3f} | {o.accuracy:.3f} |"
                                  for o in self.oracle])


def audit_world(world: World, *, split: str = "eval", seeds: int = 8, topk: int = 3, passage_words: int | None = 20,
                folder: str | Path | None = None) -> Audit:
    """Run every check on ``world``'s ``split`` with the search tool of those rollout settings (``topk``,
    ``passage_words``; the search budget is the world's ``max_searches``). ``folder``: where the world
    is (or is written to; default a temporary folder) for its noise.json."""
    if seeds < 1:
        raise ConfigError(f"seeds must be at least 1 (the rollout seeds the shape rule averages over), got {seeds}")
    if folder is None:
        with tempfile.TemporaryDirectory() as tmp:
            return audit_world(world, split=split, seeds=seeds, topk=topk, passage_words=passage_words, folder=tmp)
    from awarl.agent.env import search_env_factory
    from awarl.agent.settings import RolloutSettings
    from awarl.search.bm25 import BM25Index

    files = write_world(world, folder)
    index = BM25Index.build(world.passages)
    rollout = RolloutSettings(scope="global", topk=topk, passage_words=passage_words,
                              max_searches=world.config.max_searches, world_noise=str(files.get("noise") or "") or None)
    make_env = search_env_factory(index, rollout)
    held = world.split(split)
    answerable = [q for q in held if q.answerable]
    audit = Audit(split, len(held), len(answerable))
    u = [_ceiling(q) for q in answerable]
    mean_u = sum(u) / max(len(u), 1)

    audit.checks += _lookup(world, held)
    audit.checks += _shape_rule(held, make_env, seeds, world.config.max_searches)
    oracle, by_rank, middle = _readers(world, answerable, index, topk)
    audit.checks.append(Check("oracle - mean(u)", oracle - mean_u, "|x| <= 0.01", abs(oracle - mean_u) <= 0.01,
                              f"expected answerable accuracy of the best reader ({oracle:.3f}) minus mean(u)"))
    audit.checks.append(Check("mean(u)", mean_u, "in [0.4, 0.6]", 0.4 <= mean_u <= 0.6,
                              f"mean ceiling of the {len(answerable)} answerable questions"))
    low, high = (sum(x <= 0.2 for x in u) / max(len(u), 1), sum(x >= 0.6 for x in u) / max(len(u), 1))
    audit.checks.append(Check("share u <= 0.2", low, ">= 0.25", low >= 0.25, "answerable questions no reader gets often"))
    audit.checks.append(Check("share u >= 0.6", high, ">= 0.25", high >= 0.25, "answerable questions a reader gets mostly"))
    best = max(by_rank, key=by_rank.get) if by_rank else 1
    rank_value = by_rank.get(best, 0.0)
    audit.checks.append(Check("rank rule", rank_value, f"<= mean(u) + 0.05 = {mean_u + 0.05:.3f}",
                              rank_value <= mean_u + 0.05,
                              f"follow the namesake at rank {best} of the first search (best rank; "
                              + ", ".join(f"r{r} {v:.3f}" for r, v in sorted(by_rank.items())) + ")"))
    audit.checks.append(Check("middle share, random reader", middle["random"], "(context)", True,
                              "answerable questions at p_i in (0.2, 0.5) for a reader that picks a shown namesake at "
                              "random in every rollout"))
    audit.checks.append(Check("middle share, consistent reader", middle["consistent"], "(context)", True,
                              "the same for a reader that follows one shown namesake, the same in every rollout (p_i "
                              "0 or 1 - f per question): what a trained base's spread can reach"))
    audit.checks.append(Check("middle share, rank-1 reader", middle["rank-1"], "(context)", True,
                              f"the same for a reader that follows the first namesake shown (tie order "
                              f"{world.config.tie_order!r}: 'rollout' draws the order of tied passages per rollout)"))
    audit.checks += _coverage(world, held, make_env)
    abstain = sum(not q.answerable for q in held) / max(len(held), 1)
    audit.checks.append(Check("always abstain", abstain, "(context)", True, "the unanswerable share: abstaining everywhere"))
    return audit


def audit_recipe(recipe: str | Path | None = None, *, seed: int = 0, sets: list[str] | None = None,
                 split: str = "eval", seeds: int = 8) -> tuple[Any, Audit]:
    """Audit the world of a demo recipe (default: the shipped configs/demo_world.yaml) at ``seed``, with
    the search tool of its ``rollout:`` section; ``sets``: ``knob=value`` overrides of its ``world:``
    section (YAML values). Returns (the WorldConfig, the audit)."""
    from awarl.config_fields import load_yaml, read_yaml_file
    from awarl.data.world import WorldConfig, WorldError, generate_world
    from awarl.resources import config_path

    path = Path(recipe) if recipe is not None else config_path("demo_world.yaml")
    raw = read_yaml_file(path) or {}
    world_raw = dict(raw.get("world") or {})
    for item in sets or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise WorldError(f"--set {item!r}: expected knob=value, e.g. persons=300")
        world_raw[key.strip().removeprefix("world.")] = load_yaml(value)
    config = WorldConfig.from_dict({**world_raw, "seed": seed}, f"{path}: world")
    rollout = raw.get("rollout") or {}
    if int(rollout.get("max_searches", config.max_searches)) != config.max_searches:
        raise WorldError(f"{path}: rollout.max_searches ({rollout.get('max_searches')}) differs from world.max_searches "
                         f"({config.max_searches}), the budget the ceilings assume; make them equal")
    world = generate_world(config)
    audit = audit_world(world, split=split, seeds=seeds, topk=int(rollout.get("topk", 3)),
                        passage_words=rollout.get("passage_words", 20))
    audit.oracle = oracle_frontier(world, split)
    return config, audit


@dataclass(frozen=True)
class OraclePoint:
    """What a reader that knows u_q does under AWA-RL's base refusal reward at one γ, in expectation."""

    gamma: float
    refusal: float  # share of questions it abstains on
    precision: float  # expected correct / answered
    accuracy: float  # expected correct answers + correct abstentions, over all questions


def oracle_frontier(world: World, split: str = "eval", gammas: tuple[float, ...] = (0.2, 0.5, 1.0),
                    p_clip: float = 0.1) -> list[OraclePoint]:
    """The upper bounds the study's claims compare with: per question the oracle abstains exactly when
    the reward prefers it (`awarl.rewards.refusal.refusal_preferred` at p = u_q, 0 for unanswerable
    questions; correct 1, wrong 0, no citation term), else answers and is right with probability u_q."""
    from awarl.rewards.refusal import refusal_preferred

    held = world.split(split)
    u = [_ceiling(q) if q.answerable else 0.0 for q in held]
    out = []
    for gamma in gammas:
        refuse = refusal_preferred(u, p_clip, gamma)
        answered = [x for x, r in zip(u, refuse) if not r]
        correct = sum(answered) + sum(bool(r) and not q.answerable for q, r in zip(held, refuse))
        out.append(OraclePoint(gamma, float(refuse.mean()), sum(answered) / max(len(answered), 1),
                               correct / max(len(held), 1)))
    return out


def _ceiling(q: Any) -> float:
    return 1.0 if q.ceiling is None else q.ceiling


def _expected(q: Any) -> str:
    return q.answer if q.answerable else ABSTAIN_PHRASE


def _lookup(world: World, held: list[Any]) -> list[Check]:
    """The table answers what the SFT questions through the same first-hop city answered; a city it has
    never seen gets the commonest SFT country (a memorised fact), or, in the second row, an abstention
    (which is the always-abstain baseline wherever the table knows nothing)."""
    sft = world.split("sft")
    table = {q.chain[0]: _expected(q) for q in sft}
    country = Counter(q.answer for q in sft if q.answerable).most_common(1)[0][0]
    known = sum(q.chain[0] in table for q in held)
    rows = []
    for name, fallback, bound in (("lookup", country, 0.15), ("lookup, else abstain", ABSTAIN_PHRASE, None)):
        right = sum(table.get(q.chain[0], fallback) == _expected(q) for q in held) / max(len(held), 1)
        rows.append(Check(name, right, "<= 0.15" if bound else "(context)", right <= bound if bound else True,
                          f"SFT first-hop city -> SFT answer, else {fallback!r}; {known} held-out cities in the table"))
    return rows


def _stated(result: str, fact: str) -> re.Match | None:
    """The first line of a rendered search result whose text is ``fact`` (a pattern), matched."""
    return next((m for _, _, text in parse_results(result) if (m := re.fullmatch(fact, text))), None)


def _rank1(result: str) -> str:
    return next((text for _, _, text in parse_results(result)), "")


def _shape_rule(held: list[Any], make_env: Any, seeds: int, budget: int) -> list[Check]:
    """The shape rule, and beside it (context) the careful reader: it follows only a passage stating the
    asked relation, accepts only a country passage about that very city and retries within the budget."""
    env = make_env()
    said = {"shape": {True: [0, 0], False: [0, 0]}, "careful": {True: [0, 0], False: [0, 0]}}
    right = 0
    for seed in range(seeds):
        for q in held:
            env.reset(id=record_id(q), question=q.question, passages=[], rollout_seed=seed)
            first = env.search(gold_queries(q)[0])
            m = _PERSON.search(_rank1(first))
            link = _LINK.match(_rank1(env.search(f"country {m.group(1)}"))) if m else None
            said["shape"][q.answerable][0] += link is not None
            right += (link.group(2) if link else ABSTAIN_PHRASE) == _expected(q)
            env.reset(id=record_id(q), question=q.question, passages=[], rollout_seed=seed)
            verb = "was born in" if q.relation == "born" else "lives in"
            own = _stated(env.search(gold_queries(q)[0]), rf"{re.escape(q.person)} {verb} (\w+)\.")
            found = False
            for _ in range(budget - 1 if own else 0):
                found = _stated(env.search(f"country {own.group(1)}"), rf"{own.group(1)} is a city in the country \w+\.") is not None
                if found:
                    break
            said["careful"][q.answerable][0] += found
            for rule in said.values():
                rule[q.answerable][1] += 1
    rates = {k: (v[True][0] / max(v[True][1], 1), 1 - v[False][0] / max(v[False][1], 1)) for k, v in said.items()}
    (tpr, tnr), (ctpr, ctnr) = rates["shape"], rates["careful"]
    value = (tpr + tnr) / 2
    return [Check("shape rule", value, "<= 0.75", value <= 0.75,
                  f"balanced accuracy at telling unanswerable from answerable (answerable {tpr:.2f}, unanswerable "
                  f"{tnr:.2f}; its answers right on {right / max(len(held) * seeds, 1):.2f}), {seeds} rollout seeds"),
            Check("careful reader", (ctpr + ctnr) / 2, "(context)", True,
                  f"the same, reading the relation and the city and retrying (answerable {ctpr:.2f}, unanswerable "
                  f"{ctnr:.2f}): what reading, not memory or shape, can learn")]


def _readers(world: World, answerable: list[Any], index: Any,
             topk: int) -> tuple[float, dict[int, float], dict[str, float]]:
    """Expected answerable accuracy of the best reader (a shown namesake at random) and of the reader that
    follows the namesake at each rank, from the real index's results (noise and failures in expectation); and
    the expected share of answerable questions at p_i in `MIDDLE` for three readers: ``random`` (a shown
    namesake at random in every rollout: p_i = keep x good / shown, which is u_q where every namesake is
    shown), ``consistent`` (one shown namesake per question, chosen at random once: p_i is ``keep`` with
    probability good / shown, else 0) and ``rank-1`` (the first namesake shown: the index's first, or with
    ``tie_order: rollout`` one drawn per rollout, whose p_i is then the random reader's)."""
    cfg = world.config
    retry = 1 - cfg.visible_failure ** (cfg.max_searches - 1) if cfg.version == 2 else 1.0  # v1: no search noise
    heads = [gold_queries(q)[0] for q in answerable]
    firsts = index.search(heads, topk) if heads else []
    total, by_rank = 0.0, {r: 0.0 for r in range(1, topk + 1)}
    middle = {"random": 0.0, "consistent": 0.0, "rank-1": 0.0}
    per_rollout = cfg.tie_order == "rollout"
    link_cache: dict[str, bool] = {}
    for q, hits in zip(answerable, firsts):
        verb = " was born in " if q.relation == "born" else " lives in "
        shown = [h.passage.text.rsplit(" ", 1)[1].rstrip(".") for h in hits
                 if h.passage.text.startswith(q.person + verb)]
        keep = (1 - q.cues.get("silent_noise", 0.0)) * retry
        good = [world.parent.get(c) == q.answer and _link_found(world, index, c, topk, link_cache) for c in shown]
        random_p = keep * sum(good) / len(good) if good else 0.0
        total += random_p
        first = (random_p if per_rollout else keep * good[0]) if good else 0.0
        middle["random"] += MIDDLE[0] < random_p < MIDDLE[1]
        middle["consistent"] += sum(good) / len(good) if good and MIDDLE[0] < keep < MIDDLE[1] else 0.0
        middle["rank-1"] += MIDDLE[0] < first < MIDDLE[1]
        for r in by_rank:  # with the order drawn per rollout every rank shows each namesake alike
            by_rank[r] += (random_p if per_rollout else keep * good[min(r, len(good)) - 1]) if good else 0.0
    n = max(len(answerable), 1)
    return total / n, {r: v / n for r, v in by_rank.items()}, {k: v / n for k, v in middle.items()}


def _link_found(world: World, index: Any, city: str, topk: int, cache: dict[str, bool]) -> bool:
    if city not in cache:
        pid = world.fact_passage.get((city, "in"))
        cache[city] = pid is not None and pid in {h.passage.id for h in index.search([f"country {city}"], topk)[0]}
    return cache[city]


def _coverage(world: World, held: list[Any], make_env: Any) -> list[Check]:
    env = make_env()
    seen: set[str] = set()
    for q in world.split("sft"):
        env.reset(id=record_id(q), question=q.question, passages=[])
        for message in gold_conversation(world, q, env.search):
            seen.update(re.findall(r"\w+", str(message.get("content") or "")))
            for call in message.get("tool_calls") or []:
                seen.update(re.findall(r"\w+", str(call)))
    words: set[str] = set()
    for q in held:
        words.update(q.person.split())
        words.add(q.chain[0])
        words.update(str(v) for k, v in q.cues.items() if k in ("variant", "other_city") and v)
    missing = sorted(words - seen)
    sft_cities = {q.chain[0] for q in world.split("sft")}
    shared = sorted({q.chain[0] for q in held} & sft_cities)
    return [Check("held-out words not in SFT text", float(len(missing)), "== 0", not missing,
                  f"of {len(words)} words of held-out names and cities" + (f" (e.g. {missing[:5]})" if missing else "")),
            Check("bridge cities shared with SFT", float(len(shared)), "== 0", not shared,
                  "held-out first-hop cities that SFT questions also go through")]


MIDDLE_SHARE = f"share p in ({MIDDLE[0]}, {MIDDLE[1]})"
"""The name of `base_spread`'s check of the middle share (the one the shipped recipe's bases miss)."""


def base_spread(p_file: str | Path, world_json: str | Path) -> Audit:
    """The preconditions of a warm start (docs/fidelity.md, "The base with spread"), from its p_i estimate
    (``awarl capability estimate`` output, one row per question with ``p``) and the world.json the
    questions come from (``u`` per question): on the answerable questions, at least 25% at p <= 0.2,
    25% at p >= 0.6 and 20% in (0.2, 0.5), and Spearman(p_i, u) >= 0.5, so the base is graded by
    the world's ceilings, not by sampling noise. Unparsable rollouts count as wrong (they are in p)."""
    import json

    from awarl.data.records import iter_jsonl
    from awarl.errors import DataError

    u_of = {q["record_id"]: q.get("u") for q in json.loads(Path(world_json).read_text(encoding="utf-8"))["questions"]}
    rows = [row for _, row in iter_jsonl(Path(p_file))]
    unknown = [row["id"] for row in rows if row["id"] not in u_of]
    if unknown:
        raise DataError(p_file, "", f"{len(unknown)} questions are not in {world_json} (e.g. {unknown[0]!r}): "
                        "the estimate is of another world")
    pairs = [(float(row["p"]), float(u_of[row["id"]])) for row in rows if u_of[row["id"]] is not None
             and (row.get("answerable", True) is not False)]
    audit = Audit("p_i", len(rows), len(pairs))
    n = max(len(pairs), 1)
    p = [a for a, _ in pairs]
    low, mid, high = (sum(x <= 0.2 for x in p) / n, sum(MIDDLE[0] < x < MIDDLE[1] for x in p) / n, sum(x >= 0.6 for x in p) / n)
    rho = spearman(p, [b for _, b in pairs])
    audit.checks += [
        Check("mean p_i", sum(p) / n, "(context)", True, "mean capability on the answerable questions"),
        Check("share p <= 0.2", low, ">= 0.25", low >= 0.25, "answerable questions the base rarely gets"),
        Check(MIDDLE_SHARE, mid, ">= 0.20", mid >= 0.20, "answerable questions in between"),
        Check("share p >= 0.6", high, ">= 0.25", high >= 0.25, "answerable questions the base mostly gets"),
        Check("Spearman(p_i, u)", rho, ">= 0.5", rho >= 0.5, "p_i follows the world's ceilings, not noise"),
    ]
    return audit



def kind_label(question: dict[str, Any]) -> str:
    """The kind of one world.json question: an answerable one by its ceiling's cues as ``"m/j@f"`` (m namesakes,
    j of them lead to the gold country, silent noise f: the keys of the recipe's ``world.ceilings``), an
    unanswerable one by its kind (``missing``, ``near_miss_variant``, ``near_miss_relation``)."""
    if question.get("kind") != "answerable":
        return str(question.get("kind"))
    cues = question.get("cues") or {}
    return f"{cues.get('namesakes', 1)}/{cues.get('leading', 1)}@{float(cues.get('silent_noise', 0.0)):g}"


def by_kind(world: str | Path | dict[str, Any], runs: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Accuracy and refusal of evaluated runs per kind of question of a world v2 (`kind_label`), with the
    kind's mean ceiling u and mean p_i (the rows' ``p``: the SFT checkpoint's): where a run's headline numbers
    come from, e.g. whether it abstains where namesakes make an answer a guess and answers where one person is
    named. ``world``: its world.json (a path, or the file already read); ``runs``: name -> per-question rows of
    one evaluation (``trajectories.jsonl``: ``record_id``, ``outcome``, ``p``), all of this world. One dict per
    kind: ``kind``, ``answerable``, ``n`` (distinct questions), ``u``, ``p`` and ``runs`` (name -> ``n`` rows,
    ``accuracy``, ``refusal`` over them); answerable kinds first by falling u, then the unanswerable ones."""
    import json

    from awarl.errors import DataError

    where = world if not isinstance(world, dict) else "world.json"
    data = world if isinstance(world, dict) else json.loads(Path(world).read_text(encoding="utf-8"))
    questions = {q["record_id"]: q for q in data["questions"]}
    kinds: dict[str, dict[str, Any]] = {}
    for name, rows in runs.items():
        for row in rows:
            question = questions.get(row.get("record_id"))
            if question is None:
                raise DataError(where, "", f"run {name!r} has a question that is not in this world "
                                f"({row.get('record_id')!r}): the evaluation is of another world")
            label = kind_label(question)
            entry = kinds.setdefault(label, {"answerable": question.get("kind") == "answerable", "u": {}, "p": {},
                                             "outcomes": {}})
            entry["u"][row["record_id"]] = question.get("u")
            if isinstance(row.get("p"), (int, float)):
                entry["p"].setdefault(row["record_id"], float(row["p"]))
            entry["outcomes"].setdefault(name, []).append(row.get("outcome"))
    out = []
    for label, entry in kinds.items():
        us = [u for u in entry["u"].values() if isinstance(u, (int, float))]
        out.append({"kind": label, "answerable": entry["answerable"], "n": len(entry["u"]),
                    "u": sum(us) / len(us) if us else None,
                    "p": sum(entry["p"].values()) / len(entry["p"]) if entry["p"] else None,
                    "runs": {name: {"n": len(o), "accuracy": o.count("correct") / len(o),
                                    "refusal": o.count("abstain") / len(o)} for name, o in entry["outcomes"].items()}})
    return sorted(out, key=kind_order)


def kind_order(row: dict[str, Any]) -> tuple[Any, ...]:
    """The order of `by_kind`'s rows: answerable kinds first by falling u, then the unanswerable ones as
    `awarl.data.world_facts.KINDS` lists them."""
    from awarl.data.world_facts import KINDS

    kind = row["kind"]
    return not row["answerable"], -(row["u"] or 0.0), KINDS.index(kind) if kind in KINDS else len(KINDS), kind


def kind_markdown(kinds: list[dict[str, Any]], names: list[str], n_label: str = "questions") -> list[str]:
    """`by_kind`'s rows (or rows of the same shape) as a markdown table: per kind its size, u, p_i and, per run
    in ``names``, accuracy / refusal."""
    two = (lambda x: "–" if x is None else f"{x:.2f}")
    cell = (lambda r: "–" if r is None else f"{r['accuracy']:.2f} / {r['refusal']:.2f}")
    return [f"| kind | {n_label} | u | p_i | " + " | ".join(names) + " |", "|---" * (len(names) + 4) + "|",
            *(f"| {k['kind']} | {k['n']:.0f} | {two(k['u'])} | {two(k['p'])} | "
              + " | ".join(cell(k["runs"].get(n)) for n in names) + " |" for k in kinds)]

def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation (average ranks for ties); 0 where either side is constant."""
    def ranks(xs: list[float]) -> list[float]:
        order = sorted(range(len(xs)), key=xs.__getitem__)
        out = [0.0] * len(xs)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
                j += 1
            for k in range(i, j + 1):
                out[order[k]] = (i + j) / 2
            i = j + 1
        return out

    ra, rb = ranks(a), ranks(b)
    n = len(a)
    if n < 2:
        return 0.0
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va, vb = sum((x - ma) ** 2 for x in ra), sum((y - mb) ** 2 for y in rb)
    return cov / (va * vb) ** 0.5 if va and vb else 0.0


__all__ = ["Audit", "Check", "MIDDLE_SHARE", "OraclePoint", "audit_recipe", "audit_world", "base_spread", "by_kind", "kind_label",
           "kind_markdown", "kind_order", "oracle_frontier", "spearman"]
