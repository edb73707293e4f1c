"""AWA-RL rewards: outcome, refusal shaping, dynamic penalty and its guards, citation judges, baselines.

The trainer gets its reward functions from one factory::

    cfg = RewardConfig.from_yaml("configs/tiny_cpu.yaml")    # the ``reward:`` section
    rollout = TrainConfig.from_yaml("configs/tiny_cpu.yaml").rollout   # metric, refusal phrases
    funcs, weights = build_reward_funcs(cfg, rollout)
    GRPOTrainer(..., reward_funcs=funcs, args=GRPOConfig(reward_weights=weights, ...))
    awa = answer_abstain_reward(funcs)                          # the stateful one
    state = awa.state_dict(); awa.load_state_dict(state)        # save / restore with checkpoints

Everything here is torch-free; the one cross-process gather (`awarl.rewards.batch.gather_rows`)
uses accelerate only when a process group is running. See docs/rewards.md and docs/metrics.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from awarl.agent.settings import RolloutSettings

from awarl.rewards.awa import AnswerAbstainReward, BatchStats
from awarl.rewards.batch import batch_metrics
from awarl.rewards.citation import CitationJudgment, CitationReward, GoldJudge, LLMJudge, coverage_redundancy
from awarl.rewards.config import LLMJudgeConfig, RewardConfig, RewardConfigError
from awarl.rewards.kinds import KINDS, AbstainValue, RewardKindSpec
from awarl.rewards.outcome import judge_completion, outcome_reward
from awarl.rewards.penalty import DynamicPenalty
from awarl.rewards.refusal import (
    expected_refusal_rate,
    refusal_base_reward,
    refusal_base_rewards,
    target_refusal_rate,
)

__all__ = [
    "KINDS", "AbstainValue", "AnswerAbstainReward", "BatchStats", "CitationJudgment", "CitationReward",
    "DynamicPenalty", "GoldJudge", "LLMJudge", "LLMJudgeConfig", "RewardConfig", "RewardConfigError",
    "RewardKindSpec", "answer_abstain_reward", "batch_metrics",
    "build_reward_funcs", "coverage_redundancy", "expected_refusal_rate", "judge_completion", "outcome_reward",
    "refusal_base_reward", "refusal_base_rewards", "target_refusal_rate",
]


def build_reward_funcs(cfg: RewardConfig, rollout: RolloutSettings | None = None) -> tuple[list[Callable], list[float]]:
    """The reward functions and their weights for ``cfg``.

    Always the answer/abstain reward (``awa_reward``, or ``<kind>_reward`` for a baseline of the
    registry `KINDS`) with weight 1; plus ``citation_reward`` with weight ``w_cite`` when
    ``w_cite > 0`` and a judge is set. The llm judge reads passage texts from
    ``cfg.llm_judge.corpus_path``. The answer/abstain reward knows the citation reward, so its expected refusal
    rate counts what citations pay. ``rollout`` says what is correct and what is an abstention.
    """
    citation = None
    if cfg.w_cite > 0 and cfg.judge != "off":
        passages = None
        if cfg.judge == "llm":
            from awarl.data.records import load_corpus

            passages = {p.id: p for p in load_corpus(cfg.llm_judge.corpus_path)}
        citation = CitationReward(cfg, passages=passages, rollout=rollout)
    funcs: list[Callable] = [AnswerAbstainReward(cfg, rollout, citation=citation)]
    weights = [1.0]
    if citation is not None:
        funcs.append(citation)
        weights.append(cfg.w_cite)
    return funcs, weights


def answer_abstain_reward(funcs: Sequence[Callable]) -> AnswerAbstainReward:
    """The stateful answer/abstain reward among ``funcs`` (to checkpoint its penalty)."""
    for func in funcs:
        if isinstance(func, AnswerAbstainReward):
            return func
    raise ValueError("no AnswerAbstainReward among the reward functions")


TRL_CLI_REWARDS = ("awa_reward", "citation_reward")
"""Names ``trl grpo --reward_funcs awarl.rewards.<name>`` resolves (`awarl.integrations.trl`)."""


def __getattr__(name: str) -> Callable:
    # TRL's CLI looks reward functions up with getattr on this module. They live in
    # awarl.integrations.trl, which reads a recipe and builds on this package, so they are
    # looked up on first access (PEP 562) instead of being imported with the rewards.
    if name in TRL_CLI_REWARDS:
        from importlib import import_module

        return getattr(import_module("awarl.integrations.trl"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
