"""`RewardConfig`: every setting of the AWA reward, its baselines and the citation judges.

One field per knob, each with a one-line ``help``; the training YAML holds them under a
``reward:`` section. Defaults are awarl's own documented choices (DESIGN §6), not paper values.
Bad values are rejected when the config is built, with the reason and the fix.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import yaml

RewardKind = Literal["awa", "static", "ternary", "none"]
OutcomeMetric = Literal["em", "f1"]
JudgeKind = Literal["gold", "llm", "off"]

_KINDS = ("awa", "static", "ternary", "none")
_OUTCOMES = ("em", "f1")
_JUDGES = ("gold", "llm", "off")


class RewardConfigError(ValueError):
    """A reward setting that cannot work; the message names the field, the reason and the fix."""


def _f(default: Any, help: str) -> Any:
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass
class RewardConfig:
    """Settings of the answer/abstain reward, the dynamic penalty and the citation reward."""

    kind: RewardKind = _f("awa", "Reward for abstaining: awa (R_base - P_t), static (constant), "
                                 "ternary (+1 correct / 0 abstain / -1 wrong), none (abstain scores as wrong).")
    outcome: OutcomeMetric = _f("em", "What a correct answer earns: em (r_correct when exact match) or f1 "
                                      "(r_wrong + (r_correct - r_wrong) * token F1).")
    r_correct: float = _f(1.0, "Reward of a correct answer.")
    r_wrong: float = _f(0.0, "Reward of a wrong or unparsable answer.")
    p_clip: float = _f(0.1, "Lower clip on p in R_base = 1 - max(p, p_clip)^gamma, in [0, 1).")
    gamma: float = _f(0.5, "Courage factor in (0, 1]: smaller gamma, fewer refusals.")
    beta: float = _f(0.9, "EMA factor of the refusal-rate error, in [0, 1).")
    tau: float = _f(0.05, "Quantization step (and dead zone) of the smoothed error, > 0.")
    delta: float = _f(0.1, "Penalty per tau of smoothed error, >= 0 (0 turns the penalty off).")
    max_penalty: float = _f(1.0, "Largest absolute penalty P_max, >= 0.")
    cap_abstain: bool = _f(True, "Cap the abstain reward at 1 - p_clip^gamma so a correct answer always pays "
                                 "more; false gives the uncapped form for ablations.")
    abstain_requires_search: bool = _f(False, "An abstention counts only after at least one search; before "
                                              "that it scores as a wrong answer.")
    static_reward: float = _f(0.5, "Reward of an abstention for kind=static.")
    refusal_phrases: list[str] = _f([], "Answers that count as abstentions; empty means the protocol's "
                                        "default phrases.")
    w_cite: float = _f(0.2, "Weight of the citation reward (coverage - w_red * redundancy), >= 0; 0 drops it.")
    w_red: float = _f(0.5, "Weight of redundancy inside the citation reward, >= 0.")
    judge: JudgeKind = _f("gold", "Citation judge: gold (dataset supporting passages), llm (OpenAI-compatible "
                                  "judge model) or off.")
    judge_base_url: str | None = _f(None, "Base URL of the OpenAI-compatible judge, e.g. http://127.0.0.1:8000/v1.")
    judge_model: str | None = _f(None, "Model name sent to the judge endpoint.")
    judge_api_key_env: str | None = _f(None, "Name of the environment variable holding the judge's API key.")
    judge_timeout_s: float = _f(30.0, "Timeout of one judge request in seconds, > 0.")
    judge_max_retries: int = _f(3, "Retries of a judge request after a timeout, connection error, 429 or 5xx.")
    judge_backoff_s: float = _f(0.5, "First retry delay in seconds; it doubles on every retry.")
    judge_concurrency: int = _f(16, "Judge requests in flight at once, >= 1.")
    judge_cache_path: str | None = _f(None, "SQLite file caching judgments by judged content; none keeps "
                                            "them in memory.")
    judge_json_mode: bool = _f(True, "Ask the endpoint for a JSON object (response_format json_object).")
    judge_max_passage_chars: int = _f(1500, "Characters of each passage shown to the judge, >= 1.")
    corpus_path: str | None = _f(None, "corpus.jsonl whose passage texts the llm judge reads.")

    def __post_init__(self) -> None:
        self._check_types()
        _choice("kind", self.kind, _KINDS)
        _choice("outcome", self.outcome, _OUTCOMES)
        _choice("judge", self.judge, _JUDGES)
        if not self.r_correct > self.r_wrong:
            _fail("r_correct", f"must exceed r_wrong ({self.r_wrong}), got {self.r_correct}",
                  "a correct answer has to pay more than a wrong one")
        if not 0.0 <= self.p_clip < 1.0:
            _fail("p_clip", f"must be in [0, 1), got {self.p_clip}", "use e.g. 0.1")
        if not 0.0 < self.gamma <= 1.0:
            _fail("gamma", f"must be in (0, 1], got {self.gamma}", "use e.g. 0.5 (smaller = fewer refusals)")
        if not 0.0 <= self.beta < 1.0:
            _fail("beta", f"must be in [0, 1), got {self.beta}", "use e.g. 0.9 (0 = no smoothing)")
        if not self.tau > 0.0:
            _fail("tau", f"must be > 0, got {self.tau}", "use e.g. 0.05")
        for name in ("delta", "max_penalty", "w_cite", "w_red"):
            if getattr(self, name) < 0.0:
                _fail(name, f"must be >= 0, got {getattr(self, name)}", "use 0 to turn the term off")
        if self.judge_timeout_s <= 0:
            _fail("judge_timeout_s", f"must be > 0, got {self.judge_timeout_s}", "use e.g. 30")
        if self.judge_max_retries < 0:
            _fail("judge_max_retries", f"must be >= 0, got {self.judge_max_retries}", "use e.g. 3")
        if self.judge_backoff_s < 0:
            _fail("judge_backoff_s", f"must be >= 0, got {self.judge_backoff_s}", "use e.g. 0.5")
        if self.judge_concurrency < 1:
            _fail("judge_concurrency", f"must be >= 1, got {self.judge_concurrency}", "use e.g. 16")
        if self.judge_max_passage_chars < 1:
            _fail("judge_max_passage_chars", f"must be >= 1, got {self.judge_max_passage_chars}", "use e.g. 1500")
        if self.judge == "llm" and self.w_cite > 0 and not (self.judge_base_url and self.judge_model):
            _fail("judge_base_url", "judge=llm needs judge_base_url and judge_model",
                  "set both (e.g. http://127.0.0.1:8000/v1 and the served model name) or use judge=gold")
        if self.judge == "llm" and self.w_cite > 0 and not self.corpus_path:
            _fail("corpus_path", "judge=llm needs the passage texts it shows the judge",
                  "set corpus_path to the run's corpus.jsonl")

    def _check_types(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            kind = _field_kind(f.default if f.default is not MISSING else [])
            if f.name in ("judge_base_url", "judge_model", "judge_api_key_env", "judge_cache_path", "corpus_path"):
                if value is not None and not isinstance(value, str):
                    _fail(f.name, f"must be a string or null, got {type(value).__name__}", "quote the value")
            elif kind is float:
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    _fail(f.name, f"must be a finite number, got {value!r}", "write a plain number")
                setattr(self, f.name, float(value))
            elif kind is int:
                if isinstance(value, bool) or not isinstance(value, int):
                    _fail(f.name, f"must be an integer, got {value!r}", "write a whole number")
            elif kind is bool:
                if not isinstance(value, bool):
                    _fail(f.name, f"must be true or false, got {value!r}", "write true or false")
            elif kind is list:
                if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
                    _fail(f.name, f"must be a list of strings, got {value!r}", "write a YAML list of strings")
                setattr(self, f.name, list(value))

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None) -> "RewardConfig":
        """Build from a plain mapping (the ``reward:`` section of a training YAML); unknown keys
        are an error naming the closest known key."""
        values = dict(values or {})
        known = {f.name for f in fields(cls)}
        for key in values:
            if key not in known:
                close = difflib.get_close_matches(str(key), sorted(known), n=1)
                hint = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(sorted(known))}"
                raise RewardConfigError(f"reward config: unknown key '{key}'; {hint}")
        return cls(**values)

    @classmethod
    def from_yaml(cls, path: str | Path, section: str | None = "reward") -> "RewardConfig":
        """Read ``section`` of a YAML file (the whole file when ``section`` is None)."""
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
        if section is not None:
            if not isinstance(data, dict):
                raise RewardConfigError(f"{path}: expected a mapping at the top level")
            data = data.get(section) or {}
        if not isinstance(data, dict):
            raise RewardConfigError(f"{path}: section '{section}' must be a mapping, got {type(data).__name__}")
        try:
            return cls.from_dict(data)
        except RewardConfigError as err:
            raise RewardConfigError(f"{path}: {err}") from None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def abstain_cap(self) -> float:
        """The largest base refusal reward, 1 - p_clip^gamma (the cap on the abstain reward)."""
        return 1.0 - self.p_clip ** self.gamma


def field_help() -> dict[str, str]:
    """Field name -> one-line description, for docs and ``--help`` output."""
    return {f.name: f.metadata["help"] for f in fields(RewardConfig)}


def _field_kind(default: Any) -> type | None:
    if isinstance(default, bool):
        return bool
    if isinstance(default, int):
        return int
    if isinstance(default, float):
        return float
    if isinstance(default, list):
        return list
    return None


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        _fail(name, f"must be one of {', '.join(allowed)}, got {value!r}", f"pick one of {', '.join(allowed)}")


def _fail(name: str, problem: str, fix: str) -> None:
    raise RewardConfigError(f"reward config field '{name}' {problem}: {fix}")
