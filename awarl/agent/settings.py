"""`RolloutSettings`: the one definition of the agent that p_i, GRPO, evaluation and the chatbot run.

The paper's p_i is the share of correct rollouts of the checkpoint GRPO starts from *under the
training rollout settings*: the same prompt, search tool (scope, top-k, passage words), search and
token budgets, refusal phrases and notion of "correct". Anything else measures another agent, and
the reward then shapes against the wrong capability. So these settings are declared once, here;
a recipe holds them in its ``rollout:`` section, ``awarl capability estimate`` and ``awarl eval
run`` take them from ``--config recipe.yaml`` (or options generated from this class), every
output records them, and a stage handed an output measured under other settings refuses it.

Sampling is not part of the agent: p_i samples at GRPO's temperature (``grpo.temperature``, which
`awarl train grpo` checks against the capability rows), evaluation greedily.

Names, one meaning each:

- ``max_searches``: tool-calling rounds per rollout. The runner stops after that many rounds
  and TRL's ``max_tool_calling_iterations`` is set to it; the search tool also answers at most
  that many queries (extra calls in one round get a "search limit reached" message).
- ``max_completion_tokens``: tokens of the whole trajectory after the prompt, tool results
  included (TRL's ``max_completion_length`` is set from it).

    >>> s = RolloutSettings(topk=2, passage_words=30, max_searches=2, max_completion_tokens=256)
    >>> s.mismatch(RolloutSettings(topk=3, passage_words=30, max_searches=2, max_completion_tokens=256))
    ['topk: 2 vs 3']
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

from awarl.config_fields import ConfigError, build, doc, field_help, load_yaml
from awarl.protocol import DEFAULT_REFUSAL_PHRASES, SYSTEM_PROMPT

log = logging.getLogger(__name__)

ROLLOUT_FILE = "rollout.json"
RECIPE_FILE = "awarl_recipe.yaml"

# Rough tokens per passage word plus the "title: " and " [id]" around it; used only to warn about budgets.
_TOKENS_PER_WORD = 1.4
_PASSAGE_OVERHEAD_TOKENS = 12


@dataclass(frozen=True)
class RolloutSettings:
    """What defines the agent in every rollout (capability p_i, GRPO, evaluation, chatbot)."""

    system_prompt: str | None = doc("System message of every conversation; null = the protocol's own "
                                    "(awarl.protocol.SYSTEM_PROMPT).", default=None)
    scope: Literal["global", "closed"] = doc(
        "global: search the whole corpus; closed: each question searches only its own passages "
        "(the distractor setting). A record's 'scope' column overrides it.", default="global")
    topk: int = doc("Passages returned per search.", default=3)
    passage_words: int | None = doc("Words kept of each returned passage's text (null: the whole passage). "
                                    "Tool results count against max_completion_tokens.", default=100)
    max_searches: int = doc("Tool-calling rounds per rollout (TRL's max_tool_calling_iterations); the "
                            "search tool also answers at most this many queries.", default=4)
    max_completion_tokens: int = doc("Tokens of the whole trajectory after the prompt, tool results "
                                     "included (TRL's max_completion_length).", default=1024)
    metric: Literal["em", "f1"] = doc("What counts as correct: em (exact match) or f1 (token F1 >= 0.5); "
                                      "with f1 the reward pays the F1 of an answer.", default="em")
    refusal_phrases: tuple[str, ...] = doc("Answers that count as abstentions; empty = the protocol's "
                                           "defaults.", default=())
    chat_template: Literal["model", "qwen2_5"] = doc(
        "Chat template of every conversation: model = the model's own (it must render tool calls); qwen2_5 = "
        "TRL's Qwen2.5 tool template (byte-identical, so TRL's tool loop recognises it) for models whose own "
        "template has no tool calling, e.g. SmolLM2 (awarl.agent.chat_template).", default="model")
    world_noise: str | None = doc("A synthetic world's noise.json (world v2 writes it beside its corpus): the search "
                                  "tool then returns the listed questions' country passages silently corrupted "
                                  "(probability f per rollout) or leaves them out (per call), seeded per (record id, "
                                  "rollout seed). null: results as the index ranks them (real data; the chatbot "
                                  "serves so).", default=None)

    def __post_init__(self) -> None:
        if self.topk < 1:
            raise ConfigError(f"topk must be >= 1, got {self.topk}")
        if self.passage_words is not None and self.passage_words < 1:
            raise ConfigError(f"passage_words must be >= 1 or null, got {self.passage_words}")
        if self.max_searches < 0:
            raise ConfigError(f"max_searches must be >= 0, got {self.max_searches}")
        if self.max_completion_tokens < 1:
            raise ConfigError(f"max_completion_tokens must be >= 1, got {self.max_completion_tokens}")
        if self.system_prompt is not None and not self.system_prompt.strip():
            raise ConfigError("system_prompt is empty: leave it null for the protocol's prompt")
        if self.world_noise is not None and not str(self.world_noise).strip():
            raise ConfigError("world_noise is empty: leave it null for a search tool without noise")
        object.__setattr__(self, "refusal_phrases", tuple(self.refusal_phrases))

    # -- the values the agent really runs with ---------------------------------------------------------------
    @property
    def prompt(self) -> str:
        """The system prompt in effect."""
        return self.system_prompt if self.system_prompt is not None else SYSTEM_PROMPT

    @property
    def phrases(self) -> tuple[str, ...]:
        """The refusal phrases in effect."""
        return self.refusal_phrases or DEFAULT_REFUSAL_PHRASES

    def tool_tokens_estimate(self) -> int:
        """Rough upper bound of the tokens all search results of one rollout take."""
        words = self.passage_words if self.passage_words is not None else 100
        return int(self.max_searches * self.topk * (words * _TOKENS_PER_WORD + _PASSAGE_OVERHEAD_TOKENS))

    def budget_warning(self) -> str | None:
        """A warning when search results alone may overflow the token budget (the rollout then ends
        before the model sees them)."""
        need = self.tool_tokens_estimate()
        if need > self.max_completion_tokens:
            return (f"rollout settings: {self.max_searches} searches x {self.topk} passages x "
                    f"{self.passage_words} words need about {need} tokens, more than max_completion_tokens="
                    f"{self.max_completion_tokens}; rollouts may stop on the budget before the model reads the "
                    f"results. Lower passage_words/topk/max_searches or raise max_completion_tokens.")
        return None

    # -- serialisation and comparison ------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["refusal_phrases"] = list(self.refusal_phrases)
        return out

    def resolved(self) -> dict[str, Any]:
        """`to_dict` with the defaults in effect written out (what two stages must agree on)."""
        out = self.to_dict()
        out["system_prompt"] = self.prompt
        out["refusal_phrases"] = list(self.phrases)
        return out

    @classmethod
    def from_dict(cls, values: Any, where: str = "rollout") -> "RolloutSettings":
        """Build from a mapping (a recipe's ``rollout:`` section), every field type-checked."""
        return build(cls, values, where)

    def replace(self, **changes: Any) -> "RolloutSettings":
        """A copy with ``changes`` (each checked like a recipe value); None values are ignored."""
        changes = {k: v for k, v in changes.items() if v is not None}
        return build(type(self), {**self.to_dict(), **changes}, "rollout") if changes else self

    def mismatch(self, other: "RolloutSettings | dict[str, Any] | None", sep: str = " vs ") -> list[str]:
        """The settings that differ from ``other``, as ``"name: mine vs theirs"`` (empty when equal)."""
        if other is None:
            return ["no rollout settings recorded"]
        if isinstance(other, dict):
            other = RolloutSettings.from_dict(other, "recorded rollout settings")
        mine, theirs = self.resolved(), other.resolved()
        return [f"{name}: {_short(mine[name])}{sep}{_short(theirs[name])}" for name in mine if mine[name] != theirs[name]]

    def save(self, folder: str | Path) -> Path:
        """Write ``folder/rollout.json`` (the resolved settings, so a later default change is noticed)."""
        path = Path(folder) / ROLLOUT_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.resolved(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        return path


def load_rollout(folder: str | Path) -> RolloutSettings:
    """The settings a checkpoint (or run folder) was trained or measured with: ``rollout.json``, else the
    ``rollout:`` section of ``awarl_recipe.yaml`` beside it or one folder up."""
    folder = Path(folder)
    for base in (folder, folder.parent):
        if (base / ROLLOUT_FILE).exists():
            try:
                raw = json.loads((base / ROLLOUT_FILE).read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError) as exc:
                raise ConfigError(f"{base / ROLLOUT_FILE}: not valid JSON ({exc})") from None
            return _locate_noise(RolloutSettings.from_dict(raw, str(base / ROLLOUT_FILE)), folder)
        if (base / RECIPE_FILE).exists():
            raw = load_yaml((base / RECIPE_FILE).read_text(encoding="utf-8")) or {}
            return _locate_noise(RolloutSettings.from_dict(raw.get("rollout") or {}, f"{base / RECIPE_FILE}: rollout"),
                                 folder)
    raise ConfigError(f"{folder}: no {ROLLOUT_FILE} or {RECIPE_FILE} here or one folder up; this checkpoint does "
                      f"not say which rollout settings it was trained with (pass them explicitly)")


def _locate_noise(settings: RolloutSettings, folder: Path) -> RolloutSettings:
    """A relative ``world_noise`` is relative to the folder the run started in (a demo names
    ``world/noise.json`` from inside its folder). Read from elsewhere (``awarl eval run --model
    runs/demo/grpo/awa/final``), it is looked up beside the checkpoint and in the folders above it; the
    first that holds it is used. Left as it is when it exists as given or is found nowhere (the search tool
    then names it)."""
    noise = settings.world_noise
    if noise is None or Path(noise).is_absolute() or Path(noise).is_file():
        return settings
    for base in (folder, *folder.parents, *folder.resolve().parents):  # relative ones first, then to the root
        if (base / noise).is_file():
            log.info("%s: the world's noise file %s is %s here", folder, noise, base / noise)
            return settings.replace(world_noise=str(base / noise))
    return settings


_SET_FROM_ROLLOUT = {
    ("grpo", "max_completion_length"): "rollout.max_completion_tokens",
    ("grpo", "max_tool_calling_iterations"): "rollout.max_searches",
}
"""TRL fields the rollout settings set: a recipe that sets them in its pass-through ``grpo:`` section
would give training another agent than p_i and evaluation."""


def check_recipe_layout(raw: dict[str, Any], where: str) -> None:
    """Refuse a recipe that sets a TRL field the rollout settings set (`_SET_FROM_ROLLOUT`), naming
    the ``rollout:`` field to set instead: otherwise one stage would read it and another would not."""
    for (section, key), new in _SET_FROM_ROLLOUT.items():
        if isinstance(raw.get(section), dict) and key in raw[section]:
            raise ConfigError(f"{where}: {section}.{key} is set from {new} (one definition of the agent for p_i, "
                              f"training and evaluation): remove it from {section} and set {new}")


def require_same(expected: RolloutSettings, recorded: Any, *, what: str, fix: str) -> None:
    """Refuse ``what`` (a file, a run) recorded under other rollout settings, naming both values and the fix."""
    diff = expected.mismatch(recorded)
    if diff:
        raise ConfigError(f"{what} was measured under other rollout settings than this run's "
                          f"({'; '.join(diff)}; this run vs recorded). {fix}")


def option_help() -> dict[str, str]:
    """Field name -> help, for the command-line options generated from this class."""
    return field_help(RolloutSettings)


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = ["RECIPE_FILE", "ROLLOUT_FILE", "RolloutSettings", "check_recipe_layout", "load_rollout", "option_help",
           "require_same"]
