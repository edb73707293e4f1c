"""Baseline rewards for abstaining, selected by ``RewardConfig.kind`` (docs/rewards.md, "Formulas").

- ``static``: every abstention earns the same constant ``static_reward``;
- ``ternary``: +1 correct, 0 abstain, −1 wrong or unparsable (the usual "don't guess" scheme);
- ``none``: abstaining scores as a wrong answer (plain outcome reward);
- ``unanswerable_only``: the data-manipulation baseline: unanswerable questions are mixed into the
  training data and abstaining earns ``r_correct`` on them only (``r_wrong`` on answerable ones).

Answers keep the outcome reward, except under ``ternary``, which fixes all three values.
"""

from __future__ import annotations

from awarl.protocol import Score
from awarl.rewards.config import RewardConfig
from awarl.rewards.outcome import outcome_reward

TERNARY = {"correct": 1.0, "abstain": 0.0, "wrong": -1.0, "unparsable": -1.0}


def baseline_reward(verdict_score: Score, cfg: RewardConfig, *, metric: str = "em", answerable: bool = True) -> float:
    """Reward of one rollout under the baseline ``cfg.kind`` (static, ternary, none or unanswerable_only);
    ``metric`` is the rollout settings' notion of correct (em, or f1 for partial credit).

    >>> from awarl.protocol import Score
    >>> baseline_reward(Score("abstain", 0.0, 0.0), RewardConfig(kind="static", static_reward=0.3))
    0.3
    >>> baseline_reward(Score("wrong", 0.0, 0.0), RewardConfig(kind="ternary"))
    -1.0
    """
    if cfg.kind == "ternary":
        return TERNARY[verdict_score.outcome]
    if verdict_score.outcome == "abstain":
        if cfg.kind == "static":
            return cfg.static_reward
        if cfg.kind == "none":
            return cfg.r_wrong
        if cfg.kind == "unanswerable_only":
            return cfg.r_wrong if answerable else cfg.r_correct
        raise ValueError(f"baseline_reward has no rule for kind={cfg.kind!r}")
    return outcome_reward(verdict_score, r_correct=cfg.r_correct, r_wrong=cfg.r_wrong, outcome=metric)
