"""The registry of reward kinds: AWA-RL and its baselines, one record each (docs/rewards.md, "Kinds").

A record says what the kind pays an answer and an abstention, whether it reads the capability
column ``p`` and whether the dynamic penalty moves. `RewardConfig.kind` is typed from the
registry's names, `AnswerAbstainReward` reads only the record, and the docs table and the tests
are checked against it. Adding a baseline is one `RewardKindSpec` in `KINDS` (and one test row in
tests/rewards/test_kinds.py).

Rules are pure functions of the settings and plain numbers; the AWA rule applies the cap and the
floor (awarl's guards, docs/rewards.md "Guards") and says which of them bound.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from awarl.protocol import Score
from awarl.rewards.outcome import outcome_reward
from awarl.rewards.refusal import refusal_base_reward

if TYPE_CHECKING:
    from awarl.rewards.config import RewardConfig

# Slack in the cap and floor comparisons: far below any reward difference that matters, and it keeps
# a value computed exactly at the cap (R_base(p_clip) with P = 0) from counting as capped.
_EPS = 1e-12


@dataclass(frozen=True)
class AbstainValue:
    """What one abstention earns, and whether the cap or the floor set it."""

    value: float
    capped: bool = False
    floored: bool = False


AbstainRule = Callable[["RewardConfig", float, float, bool], AbstainValue]
"""``(cfg, p, penalty, answerable) -> AbstainValue``; ``p`` is NaN for kinds that do not read it."""
AnswerRule = Callable[[Score, "RewardConfig", str], float]
"""``(score, cfg, metric) -> reward`` of an answered (or unparsable) rollout."""


@dataclass(frozen=True)
class RewardKindSpec:
    """One reward kind: its name (``reward.kind``), the line the docs show, and its rules."""

    name: str
    summary: str
    abstain: AbstainRule
    answer: AnswerRule
    needs_p: bool = False
    controlled: bool = False  # the dynamic penalty P_t moves (only AWA-RL's controller)

    @property
    def reward_name(self) -> str:
        """The reward function's ``__name__``: TRL logs ``rewards/<name>/mean``."""
        return "awa_reward" if self.name == "awa" else f"{self.name}_reward"


def outcome_answer(score: Score, cfg: "RewardConfig", metric: str) -> float:
    """The outcome reward (`awarl.rewards.outcome.outcome_reward`) with the settings' r_correct / r_wrong."""
    return outcome_reward(score, r_correct=cfg.r_correct, r_wrong=cfg.r_wrong, outcome=metric)


def awa_abstain(cfg: "RewardConfig", p: float, penalty: float, answerable: bool = True) -> AbstainValue:
    """``R_base(p) − P_t``, capped at ``1 − p_clip^γ`` (``cap_abstain``) and floored at ``r_wrong``
    (``floor_abstain``): with the floor, no P_t makes a wrong answer pay more than abstaining.

    >>> from awarl.rewards.config import RewardConfig
    >>> awa_abstain(RewardConfig(), 0.25, 0.0).value
    0.5
    >>> awa_abstain(RewardConfig(), 0.25, 0.9)              # 0.5 - 0.9 < r_wrong = 0
    AbstainValue(value=0.0, capped=False, floored=True)
    >>> awa_abstain(RewardConfig(floor_abstain=False), 0.25, 0.9).value
    -0.4
    """
    value = refusal_base_reward(p, cfg.p_clip, cfg.gamma) - penalty
    capped = cfg.cap_abstain and value > cfg.abstain_cap + _EPS
    if capped:
        value = cfg.abstain_cap
    floored = cfg.floor_abstain and value < cfg.r_wrong - _EPS
    if floored:
        value = cfg.r_wrong
    return AbstainValue(value, capped, floored)


TERNARY = {"correct": 1.0, "abstain": 0.0, "wrong": -1.0, "unparsable": -1.0}


def ternary_answer(score: Score, cfg: "RewardConfig", metric: str) -> float:
    return TERNARY[score.outcome]


def static_abstain(cfg: "RewardConfig", p: float, penalty: float, answerable: bool = True) -> AbstainValue:
    return AbstainValue(cfg.static_reward)


def ternary_abstain(cfg: "RewardConfig", p: float, penalty: float, answerable: bool = True) -> AbstainValue:
    return AbstainValue(TERNARY["abstain"])


def none_abstain(cfg: "RewardConfig", p: float, penalty: float, answerable: bool = True) -> AbstainValue:
    return AbstainValue(cfg.r_wrong)


def unanswerable_only_abstain(cfg: "RewardConfig", p: float, penalty: float, answerable: bool = True) -> AbstainValue:
    return AbstainValue(cfg.r_wrong if answerable else cfg.r_correct)


KINDS: dict[str, RewardKindSpec] = {spec.name: spec for spec in (
    RewardKindSpec("awa", "AWA-RL: R_base(q) - P_t with the dynamic penalty, capped and floored",
                   awa_abstain, outcome_answer, needs_p=True, controlled=True),
    RewardKindSpec("static", "every abstention earns static_reward",
                   static_abstain, outcome_answer),
    RewardKindSpec("ternary", "+1 correct, 0 abstain, -1 wrong or unparsable",
                   ternary_abstain, ternary_answer),
    RewardKindSpec("none", "abstaining scores as a wrong answer (r_wrong)",
                   none_abstain, outcome_answer),
    RewardKindSpec("unanswerable_only", "data manipulation: abstaining earns r_correct on questions marked "
                   "unanswerable, r_wrong on the others",
                   unanswerable_only_abstain, outcome_answer),
)}
"""Every reward kind by name, in the order the docs list them."""

KIND_NAMES: tuple[str, ...] = tuple(KINDS)
