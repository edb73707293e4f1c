"""`RewardConfig`: every setting of the AWA reward, its guards, its baselines and the citation reward.

One field per knob, each with a one-line ``help``; the training YAML holds them under a
``reward:`` section, the LLM judge's settings in their own nested ``reward.llm_judge:`` section
(`LLMJudgeConfig`). Defaults are awarl's own documented choices (docs/rewards.md), not paper
values. Bad values are rejected when the config is built, with the reason and the fix.
"""

from __future__ import annotations

import typing
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal

from awarl.config_fields import ConfigError, build, check_type, closest, doc, load_yaml
from awarl.config_fields import field_help as config_field_help
from awarl.rewards.kinds import KIND_NAMES, KINDS

RewardKind = Literal[KIND_NAMES]  # type: ignore[valid-type]  # the registry's names (awarl.rewards.kinds)
JudgeKind = Literal["gold", "llm", "off"]
CiteOn = Literal["correct", "answered"]
AntiWindup = Literal["bound", "freeze", "off"]

RewardConfigError = ConfigError
"""A reward setting that cannot work (the one configuration error of awarl)."""


def _f(default: Any, help: str) -> Any:
    return doc(help, default=default)


@dataclass
class LLMJudgeConfig:
    """Settings of the LLM citation judge (``reward.llm_judge:``), read when ``reward.judge`` is llm."""

    base_url: str | None = _f(None, "Base URL of the OpenAI-compatible judge, e.g. http://127.0.0.1:8000/v1.")
    model: str | None = _f(None, "Model name sent to the judge endpoint.")
    api_key_env: str | None = _f(None, "Name of the environment variable holding the judge's API key.")
    timeout_s: float = _f(30.0, "Timeout of one judge request in seconds, > 0.")
    max_retries: int = _f(3, "Retries of a judge request after a timeout, connection error or HTTP 408, 409, 429, 500, 502, 503, 504.")
    backoff_s: float = _f(0.5, "First retry delay in seconds; it doubles on every retry, times a random factor in [1, 2), at most 30 s (a Retry-After header wins).")
    concurrency: int = _f(16, "Judge requests in flight at once, >= 1.")
    cache_path: str | None = _f(None, "SQLite file caching judgments by judged content; none keeps them in memory.")
    json_mode: bool = _f(True, "Ask the endpoint for a JSON object (response_format json_object).")
    max_passage_chars: int = _f(1500, "Characters of each passage shown to the judge, >= 1.")
    corpus_path: str | None = _f(None, "corpus.jsonl whose passage texts the judge reads.")

    def __post_init__(self) -> None:
        checks = (("timeout_s", self.timeout_s > 0, "must be > 0", "use e.g. 30"),
                  ("max_retries", self.max_retries >= 0, "must be >= 0", "use e.g. 3"),
                  ("backoff_s", self.backoff_s >= 0, "must be >= 0", "use e.g. 0.5"),
                  ("concurrency", self.concurrency >= 1, "must be >= 1", "use e.g. 16"),
                  ("max_passage_chars", self.max_passage_chars >= 1, "must be >= 1", "use e.g. 1500"))
        for name, ok, problem, fix in checks:
            if not ok:
                _fail(f"llm_judge.{name}", f"{problem}, got {getattr(self, name)}", fix)


@dataclass
class RewardConfig:
    """Settings of the answer/abstain reward, the dynamic penalty, its guards and the citation reward."""

    kind: RewardKind = _f("awa", "Reward kind, a name of the registry awarl.rewards.kinds: "
                          + ", ".join(KIND_NAMES) + " (docs/rewards.md, Kinds).")
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
    floor_abstain: bool = _f(True, "Floor the abstain reward at r_wrong, so a large positive P_t never makes a "
                                   "hallucinated answer pay more than abstaining; false gives the paper's "
                                   "unfloored form (ablations).")
    anti_windup: AntiWindup = _f("freeze", "Guard against a negative P_t that winds up while the cap makes it "
                                           "ineffective: freeze (a negative P_t stops growing while the cap binds on "
                                           ">= windup_share of a batch's abstentions), bound (P_t >= min_penalty, the "
                                           "smoothed error held at the edge of that step) or off (the paper's "
                                           "controller).")
    min_penalty: float = _f(-0.2, "Lowest P_t under anti_windup: bound, in [-max_penalty, 0].")
    windup_share: float = _f(0.8, "Under anti_windup: freeze, the share of a batch's abstentions at the cap from "
                                  "which a negative P_t stops growing, in (0, 1].")
    abstain_requires_search: bool = _f(False, "An abstention counts only after at least one search; before "
                                              "that it scores as a wrong answer.")
    static_reward: float = _f(0.5, "Reward of an abstention for kind=static.")
    attempt_bonus: bool = _f(False, "Generation encouragement (awarl's): every parsable answer earns "
                                    "attempt_bonus_lambda * p^gamma on top of its outcome reward (0 where p = 0); "
                                    "the abstain floor stays r_wrong.")
    attempt_bonus_lambda: float = _f(0.1, "Weight lambda of the attempt bonus, >= 0.")
    forced_answer: bool = _f(False, "Generation encouragement (awarl's): in every prompt group whose rollouts all "
                                    "abstained, one rollout is generated again with the refusal phrases banned, so "
                                    "the group keeps a gradient; it is trained on, but counts as the abstention it "
                                    "replaced in the batch refusal rate, P_t and the group diagnostics.")
    collapse_warn_share: float = _f(0.9, "Share of all-abstain groups above which a generation batch counts "
                                         "towards the refusal-collapse warning, in (0, 1].")
    collapse_warn_batches: int = _f(10, "Generation batches in a row above collapse_warn_share before the loud "
                                        "refusal-collapse warning, >= 1.")
    adaptive_p: bool = _f(False, "Adaptive p_i (awarl's): every adaptive_p_every generation batches a "
                                 "forced-answer probe of the current policy raises p_i to a lower confidence "
                                 "bound of its pooled counts (a ratchet; never lowers p_i).")
    adaptive_p_every: int = _f(10, "Generation batches between two probes, >= 1.")
    adaptive_p_samples: int = _f(4, "Forced-answer rollouts per probed question (K'), >= 1.")
    adaptive_p_questions: int = _f(64, "Questions per probe, a rolling subset of the RL questions, >= 1.")
    adaptive_p_alpha: float = _f(0.05, "Chance, per question over the whole run, that the ratchet ever raises "
                                        "its p_i above the policy's true rate (exact lower bounds, alpha split over "
                                        "the probe rounds), in (0, 1).")
    w_cite: float = _f(0.2, "Weight of the citation reward (coverage - w_red * redundancy), >= 0; 0 drops it.")
    cite_on: CiteOn = _f("correct", "Which answers earn the citation term: correct (default: citations never make "
                                    "a wrong answer pay more than abstaining) or answered (all answers to "
                                    "answerable questions; ablations). Never paid on an unanswerable record.")
    w_red: float = _f(0.5, "Weight of redundancy inside the citation reward, >= 0.")
    judge: JudgeKind = _f("gold", "Citation judge: gold (dataset supporting passages), llm (OpenAI-compatible "
                                  "judge model, settings in llm_judge) or off.")
    llm_judge: LLMJudgeConfig = doc("The LLM judge's settings (a nested section; see LLMJudgeConfig).",
                                    default_factory=LLMJudgeConfig)

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
        for name in ("delta", "max_penalty", "w_cite", "w_red", "attempt_bonus_lambda"):
            if getattr(self, name) < 0.0:
                _fail(name, f"must be >= 0, got {getattr(self, name)}", "use 0 to turn the term off")
        if not -self.max_penalty <= self.min_penalty <= 0.0:
            _fail("min_penalty", f"must be in [-max_penalty, 0] = [{-self.max_penalty}, 0], got {self.min_penalty}",
                  "use e.g. -0.2")
        for name in ("windup_share", "collapse_warn_share"):
            if not 0.0 < getattr(self, name) <= 1.0:
                _fail(name, f"must be in (0, 1], got {getattr(self, name)}", "use e.g. 0.8")
        for name in ("collapse_warn_batches", "adaptive_p_every", "adaptive_p_samples", "adaptive_p_questions"):
            if getattr(self, name) < 1:
                _fail(name, f"must be >= 1, got {getattr(self, name)}", "use e.g. 10")
        if not 0.0 < self.adaptive_p_alpha < 1.0:
            _fail("adaptive_p_alpha", f"must be in (0, 1), got {self.adaptive_p_alpha}", "use e.g. 0.05")
        if self.judge == "llm" and self.w_cite > 0:
            judge = self.llm_judge
            if not (judge.base_url and judge.model):
                _fail("llm_judge.base_url", "judge=llm needs llm_judge.base_url and llm_judge.model",
                      "set both (e.g. http://127.0.0.1:8000/v1 and the served model name) or use judge=gold")
            if not judge.corpus_path:
                _fail("llm_judge.corpus_path", "judge=llm needs the passage texts it shows the judge",
                      "set llm_judge.corpus_path to the run's corpus.jsonl")

    def _check_types(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "llm_judge":
                if isinstance(value, dict):
                    value = build(LLMJudgeConfig, value, "reward config field 'llm_judge'")
                if not isinstance(value, LLMJudgeConfig):
                    _fail("llm_judge", f"must be a mapping of judge settings, got {value!r}",
                          "write e.g. llm_judge: {base_url: ..., model: ...}")
            else:
                try:
                    value = check_type(value, hints[f.name], f.name)
                except ConfigError as exc:
                    _fail(f.name, str(exc).split(": ", 1)[-1],
                          "write a value of that type (docs/rewards.md lists every field)")
            object.__setattr__(self, f.name, value)

    @property
    def spec(self):
        """The registry record of ``kind`` (`awarl.rewards.kinds.RewardKindSpec`)."""
        return KINDS[self.kind]

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None, where: str = "reward config") -> "RewardConfig":
        """Build from a plain mapping (the ``reward:`` section of a training YAML); unknown keys
        are an error naming the closest known key."""
        values = dict(values or {})
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

    @property
    def needs_p(self) -> bool:
        """Whether the reward reads the capability column ``p`` (the kind's shaping or the attempt bonus)."""
        return self.spec.needs_p or self.attempt_bonus or self.adaptive_p


def field_help() -> dict[str, str]:
    """Field name -> one-line description, for docs and ``--help`` output (``llm_judge.<name>`` for the
    nested judge section)."""
    out = {k: v for k, v in config_field_help(RewardConfig).items() if k != "llm_judge"}
    out.update({f"llm_judge.{k}": v for k, v in config_field_help(LLMJudgeConfig).items()})
    return out


def _fail(name: str, problem: str, fix: str) -> None:
    raise ConfigError(f"reward config field '{name}' {problem}: {fix}")
