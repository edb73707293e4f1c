"""`RewardConfig`: every setting of the AWA reward, its baselines and the citation judges.

One field per knob, each with a one-line ``help``; the training YAML holds them under a
``reward:`` section. Defaults are awarl's own documented choices (docs/rewards.md), not paper values.
Bad values are rejected when the config is built, with the reason and the fix.
"""

from __future__ import annotations

import typing
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal

from awarl.config_fields import ConfigError, check_type, closest, doc, load_yaml
from awarl.config_fields import field_help as config_field_help

RewardKind = Literal["awa", "static", "ternary", "none", "unanswerable_only"]
JudgeKind = Literal["gold", "llm", "off"]
CiteOn = Literal["correct", "answered"]

_KINDS = typing.get_args(RewardKind)
_JUDGES = typing.get_args(JudgeKind)

RewardConfigError = ConfigError
"""A reward setting that cannot work (the one configuration error of awarl)."""


def _f(default: Any, help: str) -> Any:
    return doc(help, default=default)


@dataclass
class RewardConfig:
    """Settings of the answer/abstain reward, the dynamic penalty and the citation reward."""

    kind: RewardKind = _f("awa", "Reward for abstaining: awa (R_base - P_t), static (constant), "
                                 "ternary (+1 correct / 0 abstain / -1 wrong), none (abstain scores as wrong), "
                                 "unanswerable_only (the data-manipulation baseline: abstaining earns r_correct on "
                                 "questions marked unanswerable, r_wrong on the others).")
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
    w_cite: float = _f(0.2, "Weight of the citation reward (coverage - w_red * redundancy), >= 0; 0 drops it.")
    cite_on: CiteOn = _f("correct", "Which answers earn the citation term: correct (default: citations never make "
                                    "a wrong answer pay more than abstaining) or answered (all answers; ablations).")
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
        hints = typing.get_type_hints(type(self))
        for f in fields(self):
            try:
                value = check_type(getattr(self, f.name), hints[f.name], f.name)
            except ConfigError as exc:
                _fail(f.name, str(exc).split(": ", 1)[-1], "write a value of that type (docs/rewards.md lists every field)")
            object.__setattr__(self, f.name, value)

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None, where: str = "reward config") -> "RewardConfig":
        """Build from a plain mapping (the ``reward:`` section of a training YAML); unknown keys
        are an error naming the closest known key."""
        values = dict(values or {})
        for moved, to in (("outcome", "rollout.metric"), ("refusal_phrases", "rollout.refusal_phrases")):
            if moved in values:
                raise ConfigError(f"{where}: '{moved}' moved to '{to}' (the rollout settings p_i, training and "
                                  f"evaluation share); move it there")
        known = {f.name for f in fields(cls)}
        for key in values:
            if key not in known:
                hint = closest(key, known)
                raise ConfigError(f"{where}: unknown key '{key}'; " + (f"did you mean '{hint}'?" if hint else
                                                                       f"known keys: {', '.join(sorted(known))}"))
        try:
            return cls(**values)  # __post_init__ checks every type and range, naming the field and the fix
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None

    @classmethod
    def from_yaml(cls, path: str | Path, section: str | None = "reward") -> "RewardConfig":
        """Read ``section`` of a YAML file (the whole file when ``section`` is None)."""
        data = load_yaml(Path(path).read_text(encoding="utf-8")) or {}
        if section is not None:
            if not isinstance(data, dict):
                raise ConfigError(f"{path}: expected a mapping at the top level")
            data = data.get(section) or {}
        return cls.from_dict(data, f"{path}: {section or 'reward'}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def abstain_cap(self) -> float:
        """The largest base refusal reward, 1 - p_clip^gamma (the cap on the abstain reward)."""
        return 1.0 - self.p_clip ** self.gamma


def field_help() -> dict[str, str]:
    """Field name -> one-line description, for docs and ``--help`` output."""
    return config_field_help(RewardConfig)


def _fail(name: str, problem: str, fix: str) -> None:
    raise ConfigError(f"reward config field '{name}' {problem}: {fix}")
