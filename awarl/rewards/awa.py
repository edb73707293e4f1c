"""The answer/abstain reward: AWA-RL refusal shaping with the dynamic penalty, or a baseline.

`AnswerAbstainReward` is a TRL reward function, ``f(prompts, completions, completion_ids=None,
**kw) -> list[float]``, called once per generation batch on every process. What each rollout
earns comes from the kind's record in the registry (`awarl.rewards.kinds.KINDS`):

- answered: the kind's answer rule (the outcome reward, `awarl.rewards.outcome`, or ternary's
  values), plus the attempt bonus ``λ·p^γ`` on parsable answers when ``attempt_bonus`` is on;
- abstained: the kind's abstain rule; for ``awa`` ``R_base(q) − P_t``, capped at ``1 − p_clip^γ``
  (``cap_abstain``) and floored at ``r_wrong`` (``floor_abstain``); with
  ``abstain_requires_search`` an abstention before any search scores as a wrong answer.

P_t comes from `DynamicPenalty`, updated exactly once per call from the observed and expected
refusal rates of the GLOBAL batch (every process gathers the same rows, so every process
computes the same P_t), under the anti-windup guard the settings name. The expected rate agrees
with what the rewards pay: when a citation reward is attached, the value of answering a query of
capability p is ``p·(r_correct + c̄_correct) + (1 − p)·(r_wrong + c̄_wrong) + λ·p^γ``, where c̄ is the
batch's mean weighted citation term on correct (and, with ``cite_on: answered``, wrong) answers.

With ``forced_answer`` (`awarl.train.forced`), a rollout generated with the refusal banned in a group
that all abstained earns its answer's reward, but counts as the abstention it replaced in the batch
refusal rate, P_t, the batch precision / accuracy and the all-abstain group share: the controller reads
what the policy sampled. The zero-advantage and three-outcome shares describe the groups as trained.

Every row of the gathered batch carries what its reward depends on, so every process computes the
reward of every rollout: the group diagnostics (all-abstain, zero-advantage and three-outcome
groups) come from the whole batch although TRL hands each process only its slice.

What counts as correct and which phrases are abstentions come from the rollout settings
(`awarl.agent.settings.RolloutSettings`: ``metric``, ``refusal_phrases``), the very settings
p_i was measured with. Dataset columns read from ``kw``: ``answers`` (list of gold strings),
``answerable`` (default True), ``p`` (capability; ``p_i`` is accepted too; needed by ``awa`` and
the attempt bonus), ``id`` (groups rollouts of one prompt; the prompt itself otherwise).
``environments`` (SearchEnv instances with a ``queries`` list) or an ``n_search`` column give the
searches per rollout. ``log_metric`` receives every term under ``awa/…`` and ``env/…``
(docs/metrics.md); ``log_extra`` an ``outcome`` column (correct / wrong / unparsable / abstain).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from awarl.agent.settings import RolloutSettings
from awarl.rewards.adaptive import CapabilityRatchet
from awarl.rewards.batch import (
    OUTCOME_CODES,
    RolloutRow,
    batch_metrics,
    distributed_world,
    gather_rows,
    group_key,
    group_shares,
)
from awarl.rewards.config import RewardConfig
from awarl.rewards.kinds import AbstainValue, RewardKindSpec
from awarl.rewards.outcome import Verdict, judge_completion
from awarl.rewards.penalty import DynamicPenalty
from awarl.rewards.refusal import target_refusal_rate

log = logging.getLogger(__name__)

_OUTCOME_NAMES = {code: name for name, code in OUTCOME_CODES.items()}
_ABSTAIN = OUTCOME_CODES["abstain"]
_ANSWERS = (OUTCOME_CODES["correct"], OUTCOME_CODES["wrong"])  # parsable answers (the attempt bonus pays these)


@dataclass(frozen=True)
class BatchStats:
    """Everything the reward knew about one global generation batch (also what it logged)."""

    n: int
    refusal_rate: float
    expected_refusal_rate: float | None
    error: float | None
    error_ema: float
    penalty: float
    precision: float
    accuracy: float
    ra_f1: float
    all_abstain_groups: float | None
    searches_per_rollout: float | None
    updated: bool
    answer_value_correct: float = 1.0
    answer_value_wrong: float = 0.0
    abstain_capped: float | None = None
    abstain_floored: float | None = None
    zero_advantage_groups: float | None = None
    three_outcome_groups: float | None = None
    windup_held: bool | None = None
    attempt_bonus: float | None = None
    collapse_warning: bool = False
    p_mean: float | None = None
    p_raised: int | None = None
    probe_rollouts: int | None = None
    forced_answers: float | None = None
    forced_correct: float | None = None
    unparsable: float | None = None
    format_warning: bool = False

    def metrics(self) -> dict[str, float]:
        """The namespaced metric keys of docs/metrics.md (terms that are unknown are left out)."""
        out = {
            "awa/refusal_rate": self.refusal_rate,
            "awa/expected_refusal_rate": self.expected_refusal_rate,
            "awa/E": self.error,
            "awa/E_ema": self.error_ema,
            "awa/penalty": self.penalty,
            "awa/precision": self.precision,
            "awa/accuracy": self.accuracy,
            "awa/ra_f1": self.ra_f1,
            "awa/all_abstain_groups": self.all_abstain_groups,
            "awa/zero_advantage_groups": self.zero_advantage_groups,
            "awa/three_outcome_groups": self.three_outcome_groups,
            "env/searches_per_rollout": self.searches_per_rollout,
            "awa/answer_value_correct": self.answer_value_correct,
            "awa/answer_value_wrong": self.answer_value_wrong,
            "awa/abstain_capped": self.abstain_capped,
            "awa/abstain_floored": self.abstain_floored,
            "awa/windup_held": self.windup_held,
            "awa/attempt_bonus": self.attempt_bonus,
            "awa/collapse_warning": self.collapse_warning,
            "awa/p_mean": self.p_mean,
            "awa/p_raised": self.p_raised,
            "awa/probe_rollouts": self.probe_rollouts,
            "awa/forced_answers": self.forced_answers,
            "awa/forced_correct": self.forced_correct,
            "awa/unparsable": self.unparsable,
            "awa/format_collapse_warning": self.format_warning,
        }
        return {k: float(v) for k, v in out.items() if v is not None}


class AnswerAbstainReward:
    """AWA-RL reward (or a baseline) as a picklable TRL reward function with state.

    ``.penalty`` is the `DynamicPenalty`; ``state_dict()`` / ``load_state_dict()`` save and
    restore it (and the collapse watch) with checkpoints; set ``.frozen = True`` during evaluation
    so eval batches use P_t without moving it. ``.last`` holds the `BatchStats` of the latest call;
    ``.collapse_message`` the warning of a lasting refusal collapse (None while there is none).
    """

    def __init__(self, cfg: RewardConfig, rollout: RolloutSettings | None = None, citation: Any = None):
        self.cfg = cfg
        self.rollout = rollout or RolloutSettings()
        self.metric = self.rollout.metric
        self.phrases = self.rollout.phrases
        self.citation = citation  # a CitationReward whose terms the expected rate accounts for
        self.penalty = DynamicPenalty(cfg.beta, cfg.tau, cfg.delta, cfg.max_penalty,
                                      min_penalty=cfg.min_penalty if cfg.anti_windup == "bound" else None)
        self.frozen = False
        self.last: BatchStats | None = None
        self.collapse_streak = 0  # generation batches in a row with all-abstain groups above collapse_warn_share
        self.collapse_message: str | None = None
        self.format_streak = 0  # generation batches in a row with unparsable rollouts above collapse_warn_share
        self.format_message: str | None = None
        # Adaptive p_i: the probe (awarl.train.probe) folds its counts in; the rows read p_i through it.
        self.adaptive = CapabilityRatchet(cfg.adaptive_p_alpha) if cfg.adaptive_p else None
        # TRL names a reward (and its `rewards/<name>/…` metrics) after `__name__`.
        self.__name__ = cfg.spec.reward_name

    @property
    def spec(self) -> RewardKindSpec:
        """The registry record of the configured kind."""
        return self.cfg.spec

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Any = None,
                 **kw: Any) -> list[float]:
        rows, verdicts = self.rows(prompts, completions, kw)
        stats = self.update(gather_rows(rows))
        rewards = [self.row_reward(row, stats.penalty)[0] for row in rows]
        log_metric: Callable[[str, float], None] | None = kw.get("log_metric")
        if log_metric is not None:
            for name, value in stats.metrics().items():
                log_metric(name, value)
        log_extra: Callable[[str, list], None] | None = kw.get("log_extra")
        if log_extra is not None:  # a column of TRL's completions table
            log_extra("outcome", [v.score.outcome for v in verdicts])
        return rewards

    def rows(self, prompts: Sequence[Any], completions: Sequence[Any],
             kw: dict[str, Any]) -> tuple[list[RolloutRow], list[Verdict]]:
        """This process's rollouts as `RolloutRow`s: everything their rewards and the batch statistics need."""
        n = len(completions)
        verdicts = self.score(completions, kw)
        p = _capabilities(kw, n, required=self.cfg.needs_p)
        searches = _searches(kw, n)
        if self.cfg.abstain_requires_search and searches is None:
            raise ValueError("abstain_requires_search needs the search count of every rollout: pass "
                             "`environments` (SearchEnv with .queries) or an `n_search` column")
        ids = kw.get("id") or [None] * n
        if self.adaptive is not None and not all(isinstance(i, str) for i in ids):
            raise ValueError("adaptive_p needs the dataset column 'id' (the probe raises p_i per question id)")
        cite = self._citation_terms(prompts, completions, verdicts, kw)
        forced = _forced(kw, n)
        rows = []
        for i, verdict in enumerate(verdicts):
            p_i = float(p[i]) if p is not None else math.nan
            if self.adaptive is not None:
                p_i = self.adaptive.p(ids[i], p_i)
            rows.append(RolloutRow(group=group_key(ids[i], prompts[i] if i < len(prompts) else None),
                                   outcome=OUTCOME_CODES[verdict.score.outcome], p=p_i,
                                   searches=int(searches[i]) if searches is not None else -1, cite=cite[i],
                                   answerable=verdict.answerable,
                                   answer_reward=math.nan if verdict.abstained else self.answer_reward(verdict, p_i),
                                   forced=forced[i]))
        return rows, verdicts

    def score(self, completions: Sequence[Any], kw: dict[str, Any]) -> list[Verdict]:
        """Parse and score every completion with the protocol's scorer."""
        n = len(completions)
        answers = _column(kw, "answers", n)
        answerable = kw.get("answerable") or [True] * n
        if len(answerable) != n:
            raise ValueError(f"reward column 'answerable' has {len(answerable)} values for {n} completions")
        verdicts = []
        for i, completion in enumerate(completions):
            golds = answers[i]
            if isinstance(golds, str) or not isinstance(golds, Sequence):
                raise ValueError(f"reward column 'answers', rollout {i}: expected a list of strings, "
                                 f"got {type(golds).__name__}")
            verdicts.append(judge_completion(completion, golds, answerable=bool(answerable[i]),
                                             metric=self.metric, phrases=self.phrases))
        return verdicts

    def answer_reward(self, verdict: Verdict, p: float) -> float:
        """What an answered (or unparsable) rollout earns: the kind's answer rule, plus the attempt
        bonus ``λ·p^γ`` on a parsable answer when ``attempt_bonus`` is on."""
        value = self.spec.answer(verdict.score, self.cfg, self.metric)
        return value + self.attempt_bonus(verdict.score.outcome, p)

    def attempt_bonus(self, outcome: str, p: float) -> float:
        """``λ·p^γ`` for a parsable answer (correct or wrong) when the bonus is on, else 0."""
        if not self.cfg.attempt_bonus or outcome not in ("correct", "wrong"):
            return 0.0
        return self.cfg.attempt_bonus_lambda * p ** self.cfg.gamma

    def row_reward(self, row: RolloutRow, penalty: float) -> tuple[float, AbstainValue | None]:
        """The reward of one gathered row under ``penalty``, and the shaped abstain value (None where the
        row is an answer or an abstention before any search under ``abstain_requires_search``)."""
        if row.outcome != _ABSTAIN:
            return row.answer_reward, None
        if self.cfg.abstain_requires_search and row.searches == 0:
            return self.cfg.r_wrong, None
        shaped = self.spec.abstain(self.cfg, row.p, penalty, row.answerable)
        return shaped.value, shaped

    def _citation_terms(self, prompts: Sequence[Any], completions: Sequence[Any], verdicts: Sequence[Verdict],
                        kw: dict[str, Any]) -> list[float]:
        """The weighted citation term each rollout of this slice is paid (NaN where none is)."""
        if self.citation is None:
            return [math.nan] * len(completions)
        terms = self.citation.terms(prompts, completions, kw, verdicts=verdicts)
        weight = self.citation.cfg.w_cite
        return [math.nan if t is None else weight * t for t in terms]

    def answer_values(self, rows: Sequence[RolloutRow]) -> tuple[float, float]:
        """What a correct and a wrong answer are worth in this batch: the outcome rewards plus the
        mean citation term the batch paid on such answers (0 when none was paid)."""
        correct = [r.cite for r in rows if r.outcome == OUTCOME_CODES["correct"] and not math.isnan(r.cite)]
        wrong = [r.cite for r in rows if r.outcome == OUTCOME_CODES["wrong"] and not math.isnan(r.cite)]
        return (self.cfg.r_correct + (sum(correct) / len(correct) if correct else 0.0),
                self.cfg.r_wrong + (sum(wrong) / len(wrong) if wrong else 0.0))

    def update(self, rows: Sequence[RolloutRow]) -> BatchStats:
        """Global statistics of one generation batch; moves the penalty once (a controlled kind, not frozen)."""
        if not rows:
            raise ValueError("the reward got an empty generation batch")
        cfg = self.cfg
        metrics = batch_metrics([_OUTCOME_NAMES[r.sampled] for r in rows])  # the policy's own choices
        p = np.array([r.p for r in rows], dtype=np.float64)
        value_correct, value_wrong = self.answer_values(rows)
        expected = None
        if not np.isnan(p).any():
            expected = target_refusal_rate(p, cfg, value_correct, value_wrong)
        updated = self.spec.controlled and not self.frozen and expected is not None
        held = None
        if updated:
            held = cfg.anti_windup == "freeze" and self._cap_binds(rows)
            self.penalty.update(metrics.refusal_rate, expected, hold_negative=held)
        paid = [self.row_reward(row, self.penalty.value) for row in rows]
        shaped = [value for _, value in paid if value is not None]
        totals = [reward + (0.0 if math.isnan(row.cite) else row.cite) for (reward, _), row in zip(paid, rows)]
        groups = group_shares(rows, totals)  # what GRPO trains on
        sampled = group_shares([replace(r, outcome=r.sampled) for r in rows], totals)  # what the policy sampled
        forced = [r for r in rows if r.forced]
        bonus = [self.attempt_bonus(_OUTCOME_NAMES[r.outcome], r.p) for r in rows if r.outcome in _ANSWERS]
        searches = [r.searches for r in rows]
        unparsable = sum(r.sampled == OUTCOME_CODES["unparsable"] for r in rows) / len(rows)
        self.last = BatchStats(
            n=len(rows),
            refusal_rate=metrics.refusal_rate,
            expected_refusal_rate=expected,
            error=None if expected is None else metrics.refusal_rate - expected,
            error_ema=self.penalty.state.error_ema,
            penalty=self.penalty.value,
            precision=metrics.precision,
            accuracy=metrics.accuracy,
            ra_f1=metrics.ra_f1,
            all_abstain_groups=None if sampled is None else sampled.all_abstain,
            searches_per_rollout=None if min(searches) < 0 else sum(searches) / len(searches),
            updated=updated,
            answer_value_correct=value_correct,
            answer_value_wrong=value_wrong,
            abstain_capped=_share([v.capped for v in shaped]) if self.spec.controlled else None,
            abstain_floored=_share([v.floored for v in shaped]) if self.spec.controlled else None,
            zero_advantage_groups=None if groups is None else groups.zero_advantage,
            three_outcome_groups=None if groups is None else groups.three_outcome,
            windup_held=held,
            attempt_bonus=(sum(bonus) / len(bonus) if bonus else 0.0) if cfg.attempt_bonus else None,
            collapse_warning=self._watch_collapse(None if sampled is None else sampled.all_abstain),
            p_mean=None if np.isnan(p).any() else float(p.mean()),
            p_raised=None if self.adaptive is None else len(self.adaptive.raised),
            probe_rollouts=None if self.adaptive is None else self.adaptive.rollouts,
            forced_answers=(len(forced) / groups.groups if groups else 0.0) if cfg.forced_answer else None,
            forced_correct=_share([r.outcome == OUTCOME_CODES["correct"] for r in forced]),
            unparsable=unparsable,
            format_warning=self._watch_format(unparsable),
        )
        return self.last

    def _cap_binds(self, rows: Sequence[RolloutRow]) -> bool:
        """Whether the cap binds on ≥ ``windup_share`` of the batch's shaped abstentions under the current P_t."""
        values = [self.row_reward(row, self.penalty.value)[1] for row in rows if row.outcome == _ABSTAIN]
        capped = [v.capped for v in values if v is not None]
        return bool(capped) and sum(capped) >= self.cfg.windup_share * len(capped)

    def _watch_collapse(self, all_abstain: float | None) -> bool:
        """Count training batches in a row whose all-abstain share exceeds ``collapse_warn_share``; at
        ``collapse_warn_batches`` (and every as many batches after) warn loudly, saying what to change."""
        return self._watch("collapse", all_abstain, collapse_advice)

    def _watch_format(self, unparsable: float) -> bool:
        """The same watch for a format collapse: the share of rollouts with no parsable answer or abstention."""
        return self._watch("format", unparsable, format_advice)

    def _watch(self, name: str, share: float | None, advice: Callable[[int, float, RewardConfig], str]) -> bool:
        """One collapse watch over ``<name>_streak`` and ``<name>_message``: True while the warning stands."""
        if self.frozen:  # evaluation batches do not count
            return getattr(self, f"{name}_message") is not None
        cfg = self.cfg
        if share is None or share <= cfg.collapse_warn_share:
            setattr(self, f"{name}_streak", 0)
            setattr(self, f"{name}_message", None)
            return False
        streak = getattr(self, f"{name}_streak") + 1
        setattr(self, f"{name}_streak", streak)
        if streak < cfg.collapse_warn_batches:
            return False
        message = advice(streak, share, cfg)
        setattr(self, f"{name}_message", message)
        if streak % cfg.collapse_warn_batches == 0 and distributed_world()[0] == 0:
            log.warning(message)
        return True

    def state_dict(self) -> dict[str, Any]:
        """The penalty state (Ē, P, last E, step), the collapse watch and the adaptive p_i ratchet: save it
        with every checkpoint."""
        out = {**self.penalty.state_dict(), "collapse_streak": self.collapse_streak, "format_streak": self.format_streak}
        if self.adaptive is not None:
            out["adaptive"] = self.adaptive.state_dict()
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = dict(state)
        adaptive = state.pop("adaptive", None)
        if (adaptive is None) != (self.adaptive is None):
            raise ValueError("penalty state: the checkpoint " + ("has no" if adaptive is None else "has an")
                             + " adaptive p_i state but reward.adaptive_p is "
                             + ("on" if self.adaptive is not None else "off") + "; resume with the same reward settings")
        if adaptive is not None:
            self.adaptive.load_state_dict(adaptive)
        streaks = {name: state.pop(name, 0) for name in ("collapse_streak", "format_streak")}  # older states: 0
        for name, streak in streaks.items():
            if isinstance(streak, bool) or not isinstance(streak, int) or streak < 0:
                raise ValueError(f"penalty state: '{name}' must be a whole number >= 0, got {streak!r}")
        self.penalty.load_state_dict(state)
        self.collapse_streak, self.format_streak = streaks["collapse_streak"], streaks["format_streak"]

    def __repr__(self) -> str:
        return f"AnswerAbstainReward(kind={self.cfg.kind!r}, penalty={self.penalty!r})"


def collapse_advice(streak: int, share: float, cfg: RewardConfig) -> str:
    """The loud warning of a lasting refusal collapse, with what to change."""
    return (f"REFUSAL COLLAPSE: {share:.0%} of the prompt groups abstained on every rollout, more than "
            f"{cfg.collapse_warn_share:.0%} for {streak} generation batches in a row. GRPO learns nothing from "
            f"such a group (equal rewards, zero advantage), so this state does not fix itself. Change: turn on "
            f"generation encouragement (reward.forced_answer: true, a forced answer in every all-abstain group, "
            f"or reward.attempt_bonus: true) or adaptive p_i (reward.adaptive_p: true); "
            f"start GRPO from a stronger base (more SFT steps, or fewer abstentions in the SFT data); or lower "
            f"reward.gamma / use reward.kind: none to see whether the policy can answer at all.")


def format_advice(streak: int, share: float, cfg: RewardConfig) -> str:
    """The loud warning of a lasting format collapse, with what to change."""
    return (f"FORMAT COLLAPSE: {share:.0%} of the rollouts ended without a parsable answer or abstention (a malformed "
            f"tool call, no final answer), more than {cfg.collapse_warn_share:.0%} for {streak} generation batches in "
            f"a row. Every rollout then earns the same reward, GRPO's advantages are zero and the policy cannot learn "
            f"its way back. Change: restart GRPO from a checkpoint saved before it (grpo.save_total_limit keeps more "
            f"than the last) with a lower grpo.learning_rate, or with a KL term to the start (grpo.beta > 0); see "
            f"the generations in the logs (grpo.log_completions: true).")


def _share(flags: Sequence[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def _column(kw: dict[str, Any], name: str, n: int) -> Sequence[Any]:
    if name not in kw or kw[name] is None:
        raise ValueError(f"the reward needs the dataset column '{name}' (got columns: {sorted(kw)})")
    values = kw[name]
    if len(values) != n:
        raise ValueError(f"reward column '{name}' has {len(values)} values for {n} completions")
    return values


def _capabilities(kw: dict[str, Any], n: int, *, required: bool) -> np.ndarray | None:
    name = "p" if kw.get("p") is not None else "p_i" if kw.get("p_i") is not None else None
    if name is None:
        if required:
            raise ValueError("the AWA reward needs the capability column 'p' (share of base-model rollouts "
                             "judged correct per query; `awarl capability` writes it)")
        return None
    values = _column(kw, name, n)
    out = np.empty(n, dtype=np.float64)
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0.0 <= v <= 1.0):
            raise ValueError(f"reward column '{name}', rollout {i}: capability must be a number in [0, 1], "
                             f"got {v!r}")
        out[i] = v
    return out


def _forced(kw: dict[str, Any], n: int) -> list[bool]:
    """Per rollout, whether it is a forced answer (`awarl.train.forced` marks its environment)."""
    envs = kw.get("environments") or []
    if len(envs) != n:
        return [False] * n
    return [getattr(env, "forced_answer", False) is True for env in envs]


def _searches(kw: dict[str, Any], n: int) -> list[int] | None:
    envs = kw.get("environments")
    if envs:
        if len(envs) != n:
            raise ValueError(f"got {len(envs)} environments for {n} completions")
        if all(hasattr(env, "queries") for env in envs):
            return [len(env.queries) for env in envs]
    if kw.get("n_search") is not None:
        return [int(v) for v in _column(kw, "n_search", n)]
    return None
