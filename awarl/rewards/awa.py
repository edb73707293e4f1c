"""The answer/abstain reward: AWA-RL refusal shaping with the dynamic penalty, or a baseline.

`AnswerAbstainReward` is a TRL reward function, ``f(prompts, completions, completion_ids=None,
**kw) -> list[float]``, called once per generation batch on every process. Per rollout:

- answered: the outcome reward (`awarl.rewards.outcome`);
- abstained (kind ``awa``): ``R_base(q) − P_t``, capped at ``1 − p_clip^γ`` unless
  ``cap_abstain`` is off; with ``abstain_requires_search`` an abstention before any search
  scores as a wrong answer;
- abstained (kind ``static`` / ``ternary`` / ``none``): the baseline's value.

P_t comes from `DynamicPenalty`, updated exactly once per call from the observed and expected
refusal rates of the GLOBAL batch (every process gathers the same rows, so every process
computes the same P_t). The expected rate agrees with what the rewards pay: when a citation
reward is attached, the value of answering a query of capability p is
``p·(r_correct + c̄_correct) + (1 − p)·(r_wrong + c̄_wrong)``, where c̄ is the batch's mean weighted
citation term on correct (and, with ``cite_on: answered``, wrong) answers — so the controller
does not aim at a refusal rate the rewards do not favour.

What counts as correct and which phrases are abstentions come from the rollout settings
(`awarl.agent.settings.RolloutSettings`: ``metric``, ``refusal_phrases``), the very settings
p_i was measured with. Dataset columns read from ``kw``: ``answers`` (list of gold strings),
``answerable`` (default True), ``p`` (capability; ``p_i`` is accepted too; needed by ``awa``),
``id`` (groups rollouts of one prompt; the prompt itself otherwise). ``environments`` (SearchEnv
instances with a ``queries`` list) or an ``n_search`` column give the searches per rollout.
``log_metric`` receives every term under ``awa/…`` and ``env/…`` (docs/metrics.md);
``log_extra`` an ``outcome`` column (correct / wrong / unparsable / abstain) for TRL's table.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from awarl.agent.settings import RolloutSettings
from awarl.rewards.baselines import baseline_reward
from awarl.rewards.batch import (
    OUTCOME_CODES,
    RolloutRow,
    all_abstain_share,
    batch_metrics,
    gather_rows,
    group_key,
)
from awarl.rewards.config import RewardConfig
from awarl.rewards.outcome import Verdict, judge_completion, outcome_reward
from awarl.rewards.penalty import DynamicPenalty
from awarl.rewards.refusal import expected_refusal_rate, refusal_base_rewards

_OUTCOME_NAMES = {code: name for name, code in OUTCOME_CODES.items()}


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
    abstain_capped: float | None = None

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
            "env/searches_per_rollout": self.searches_per_rollout,
            "awa/answer_value_correct": self.answer_value_correct,
            "awa/abstain_capped": self.abstain_capped,
        }
        return {k: float(v) for k, v in out.items() if v is not None}


class AnswerAbstainReward:
    """AWA-RL reward (or a baseline) as a picklable TRL reward function with state.

    ``.penalty`` is the `DynamicPenalty`; ``state_dict()`` / ``load_state_dict()`` save and
    restore it with checkpoints; set ``.frozen = True`` during evaluation so eval batches use
    P_t without moving it. ``.last`` holds the `BatchStats` of the latest call.
    """

    def __init__(self, cfg: RewardConfig, rollout: RolloutSettings | None = None, citation: Any = None):
        self.cfg = cfg
        self.rollout = rollout or RolloutSettings()
        self.metric = self.rollout.metric
        self.phrases = self.rollout.phrases
        self.citation = citation  # a CitationReward whose terms the expected rate accounts for
        self.penalty = DynamicPenalty(cfg.beta, cfg.tau, cfg.delta, cfg.max_penalty)
        self.frozen = False
        self.last: BatchStats | None = None
        # TRL names a reward (and its `rewards/<name>/…` metrics) after `__name__`.
        self.__name__ = "awa_reward" if cfg.kind == "awa" else f"{cfg.kind}_reward"

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Any = None,
                 **kw: Any) -> list[float]:
        n = len(completions)
        verdicts = self.score(completions, kw)
        p = _capabilities(kw, n, required=self.cfg.kind == "awa")
        searches = _searches(kw, n)
        if self.cfg.abstain_requires_search and searches is None:
            raise ValueError("abstain_requires_search needs the search count of every rollout: pass "
                             "`environments` (SearchEnv with .queries) or an `n_search` column")
        ids = kw.get("id") or [None] * n
        cite = self._citation_terms(prompts, completions, verdicts, kw)
        rows = [RolloutRow(group=group_key(ids[i], prompts[i] if i < len(prompts) else None),
                           outcome=OUTCOME_CODES[verdicts[i].score.outcome],
                           p=float(p[i]) if p is not None else math.nan,
                           searches=int(searches[i]) if searches is not None else -1,
                           cite=cite[i])
                for i in range(n)]
        stats = self.update(gather_rows(rows))
        rewards = self.rewards(verdicts, p, searches, stats.penalty)
        log_metric: Callable[[str, float], None] | None = kw.get("log_metric")
        if log_metric is not None:
            for name, value in stats.metrics().items():
                log_metric(name, value)
        log_extra: Callable[[str, list], None] | None = kw.get("log_extra")
        if log_extra is not None:  # a column of TRL's completions table
            log_extra("outcome", [v.score.outcome for v in verdicts])
        return rewards

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
        """Global statistics of one generation batch; moves the penalty once (kind awa, not frozen)."""
        if not rows:
            raise ValueError("the reward got an empty generation batch")
        metrics = batch_metrics([_OUTCOME_NAMES[r.outcome] for r in rows])
        p = np.array([r.p for r in rows], dtype=np.float64)
        expected = None
        cfg = self.cfg
        value_correct, value_wrong = self.answer_values(rows)
        if not np.isnan(p).any():
            expected = expected_refusal_rate(p, cfg.p_clip, cfg.gamma, value_correct, value_wrong)
        updated = cfg.kind == "awa" and not self.frozen and expected is not None
        if updated:
            self.penalty.update(metrics.refusal_rate, expected)
        searches = [r.searches for r in rows]
        capped = None
        abstain_p = [r.p for r in rows if r.outcome == OUTCOME_CODES["abstain"]]
        if cfg.kind == "awa" and abstain_p and not np.isnan(abstain_p).any():
            values = refusal_base_rewards(abstain_p, cfg.p_clip, cfg.gamma) - self.penalty.value
            capped = float((values > cfg.abstain_cap + 1e-12).mean())
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
            all_abstain_groups=all_abstain_share(rows),
            searches_per_rollout=None if min(searches) < 0 else sum(searches) / len(searches),
            updated=updated,
            answer_value_correct=value_correct,
            abstain_capped=capped,
        )
        return self.last

    def rewards(self, verdicts: Sequence[Verdict], p: np.ndarray | None, searches: Sequence[int] | None,
                penalty: float) -> list[float]:
        """Per-rollout rewards of this process's slice, given the batch's penalty."""
        cfg = self.cfg
        base = refusal_base_rewards(p, cfg.p_clip, cfg.gamma) if cfg.kind == "awa" else None
        out = []
        for i, verdict in enumerate(verdicts):
            if not verdict.abstained:
                if cfg.kind == "awa":
                    out.append(outcome_reward(verdict.score, r_correct=cfg.r_correct, r_wrong=cfg.r_wrong,
                                              outcome=self.metric))
                else:
                    out.append(baseline_reward(verdict.score, cfg, metric=self.metric))
            elif cfg.abstain_requires_search and searches is not None and searches[i] == 0:
                out.append(cfg.r_wrong)
            elif cfg.kind == "awa":
                value = float(base[i]) - penalty
                out.append(min(value, cfg.abstain_cap) if cfg.cap_abstain else value)
            else:
                out.append(baseline_reward(verdict.score, cfg, metric=self.metric, answerable=verdict.answerable))
        return out

    def state_dict(self) -> dict[str, Any]:
        """The penalty state (Ē, P, last E, step): save it with every checkpoint."""
        return self.penalty.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.penalty.load_state_dict(state)

    def __repr__(self) -> str:
        return f"AnswerAbstainReward(kind={self.cfg.kind!r}, penalty={self.penalty!r})"


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
