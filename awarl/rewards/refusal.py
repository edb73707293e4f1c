"""Refusal shaping: the base reward of abstaining and the batch's expected refusal rate.

docs/rewards.md ("Formulas"): ``R_base(q) = 1 - max(p_q, p_clip)^gamma``, where ``p_q`` is the capability
estimate (share of the base model's rollouts judged correct) and ``gamma`` in (0, 1] is the
courage factor. Refusing is the better bet for a query when ``R_base(q)`` beats the expected
reward of answering, ``p_q * r_correct + (1 - p_q) * r_wrong`` (plus the attempt bonus
``lambda * p_q^gamma`` when it is on); the expected refusal rate of a batch is the share of its
rollouts whose query is such a query. One formula, used by training, the demo and the study.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from awarl.rewards.config import RewardConfig


def refusal_base_reward(p: float, p_clip: float, gamma: float) -> float:
    """``1 - max(p, p_clip)^gamma``: what abstaining on a query of capability ``p`` earns
    before the dynamic penalty.

    >>> refusal_base_reward(0.25, 0.1, 0.5)
    0.5
    >>> refusal_base_reward(0.0, 0.1, 1.0)   # clipped: hopeless queries pay 1 - p_clip
    0.9
    """
    _check_params(p_clip, gamma)
    if not (0.0 <= p <= 1.0):
        raise ValueError(f"capability p must be in [0, 1], got {p!r}")
    return 1.0 - max(p, p_clip) ** gamma


def refusal_base_rewards(p: Sequence[float] | np.ndarray, p_clip: float, gamma: float) -> np.ndarray:
    """Vectorised `refusal_base_reward` over an array of capabilities.

    >>> refusal_base_rewards([0.25, 1.0], 0.1, 0.5).tolist()
    [0.5, 0.0]
    """
    _check_params(p_clip, gamma)
    arr = _as_p_array(p)
    return 1.0 - np.maximum(arr, p_clip) ** gamma


def refusal_preferred(p: Sequence[float] | np.ndarray, p_clip: float, gamma: float,
                      r_correct: float = 1.0, r_wrong: float = 0.0, attempt_bonus: float = 0.0) -> np.ndarray:
    """Per query: True when ``R_base(q) > p·r_correct + (1 − p)·r_wrong + λ·p^γ`` (refusing is the better
    bet); ``attempt_bonus`` is λ (0: no bonus)."""
    arr = _as_p_array(p)
    answer_value = arr * r_correct + (1.0 - arr) * r_wrong + attempt_bonus * arr ** gamma
    return refusal_base_rewards(arr, p_clip, gamma) > answer_value


def expected_refusal_rate(p_values: Sequence[float] | np.ndarray, p_clip: float, gamma: float,
                          r_correct: float = 1.0, r_wrong: float = 0.0, attempt_bonus: float = 0.0) -> float:
    """Share of rollouts whose query has ``R_base(q) > p·r_correct + (1 − p)·r_wrong + λ·p^γ``
    (``attempt_bonus`` = λ).

    ``p_values`` holds one capability per rollout (a query with G rollouts appears G times),
    so the rate is over rollouts, like the observed refusal rate it is compared with.

    >>> expected_refusal_rate([0.0, 0.0, 0.9, 0.9], p_clip=0.1, gamma=0.5)
    0.5
    """
    arr = _as_p_array(p_values)
    if arr.size == 0:
        raise ValueError("expected_refusal_rate needs at least one capability value")
    return float(refusal_preferred(arr, p_clip, gamma, r_correct, r_wrong, attempt_bonus).mean())


def target_refusal_rate(p_values: Sequence[float] | np.ndarray, cfg: "RewardConfig",
                        value_correct: float | None = None, value_wrong: float | None = None) -> float:
    """The expected refusal rate AWA-RL trains towards under the settings ``cfg``: `expected_refusal_rate`
    with what those rewards pay an answer. ``value_correct`` / ``value_wrong`` are the outcome rewards plus
    the mean weighted citation term paid on correct / wrong answers (``awa/answer_value_correct`` /
    ``awa/answer_value_wrong`` in the training log; default r_correct / r_wrong, no citation term); the
    attempt bonus λ counts when ``cfg.attempt_bonus`` is on. The one formula: training
    (`AnswerAbstainReward.update`, values from the batch), the demo report and the fidelity study
    (values from the training log) all call it.

    >>> from awarl.rewards.config import RewardConfig
    >>> target_refusal_rate([0.3], RewardConfig())          # R_base(0.3) = 0.45 > 0.3
    1.0
    >>> target_refusal_rate([0.3], RewardConfig(), value_correct=1.6)   # a citation term of 0.6 on correct answers
    0.0
    """
    return expected_refusal_rate(p_values, cfg.p_clip, cfg.gamma,
                                 cfg.r_correct if value_correct is None else value_correct,
                                 cfg.r_wrong if value_wrong is None else value_wrong,
                                 cfg.attempt_bonus_lambda if cfg.attempt_bonus else 0.0)


def _check_params(p_clip: float, gamma: float) -> None:
    if not (0.0 <= p_clip < 1.0):
        raise ValueError(f"p_clip must be in [0, 1), got {p_clip!r}")
    if not (0.0 < gamma <= 1.0):
        raise ValueError(f"gamma must be in (0, 1], got {gamma!r}")


def _as_p_array(p: Sequence[float] | np.ndarray) -> np.ndarray:
    arr = np.asarray(p, dtype=np.float64)
    if arr.size and not (np.all(np.isfinite(arr)) and arr.min() >= 0.0 and arr.max() <= 1.0):
        bad = next(i for i, v in enumerate(arr.ravel().tolist()) if not (math.isfinite(v) and 0.0 <= v <= 1.0))
        raise ValueError(f"capability p must be in [0, 1]; value {arr.ravel()[bad]!r} at index {bad}")
    return arr
