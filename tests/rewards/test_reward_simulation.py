"""A simulated GRPO loop, no model: a policy whose refusal probability follows its rewards.

The policy has one refusal logit for every query: it cannot yet tell the queries it can answer
from those it cannot, which is exactly when the batch-level penalty matters. Each step samples
16 prompts × 8 rollouts; a rollout abstains with probability σ(a), otherwise answers correctly
with the query's capability p. Rewards come from the real `AnswerAbstainReward` on real
completion strings; advantages are GRPO's group-normalised rewards; ``a`` follows the
policy gradient.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from awarl.protocol import ABSTAIN_PHRASE
from awarl.rewards import AnswerAbstainReward, RewardConfig, expected_refusal_rate

P_GRID = [i / 8 for i in range(9)] * 4  # 36 queries, capabilities 0, 1/8, ..., 1
ABSTAIN = [{"role": "assistant", "content": f"<answer>{ABSTAIN_PHRASE}</answer>"}]
RIGHT = [{"role": "assistant", "content": "<answer>gold</answer>"}]
WRONG = [{"role": "assistant", "content": "<answer>other</answer>"}]
EXPECTED = expected_refusal_rate(P_GRID, p_clip=0.1, gamma=0.5)  # 4/9: queries with p < 0.382


def train(cfg: RewardConfig, *, logit: float = 0.0, steps: int = 150, seed: int = 0, prompts: int = 16,
          generations: int = 8, lr: float = 1.0) -> tuple[float, list[float]]:
    """Run the loop; return the final refusal logit and the observed refusal rate per step."""
    rng = np.random.default_rng(seed)
    reward = AnswerAbstainReward(cfg)
    rates = []
    for _ in range(steps):
        queries = rng.choice(len(P_GRID), prompts, replace=False)
        refuse_prob = 1.0 / (1.0 + math.exp(-logit))
        refused = rng.random((prompts, generations)) < refuse_prob
        lucky = rng.random((prompts, generations)) < np.array([P_GRID[q] for q in queries])[:, None]
        completions = [ABSTAIN if refused[i, j] else RIGHT if lucky[i, j] else WRONG
                       for i in range(prompts) for j in range(generations)]
        n = len(completions)
        r = np.array(reward([[]] * n, completions, answers=[["gold"]] * n,
                            p=[P_GRID[q] for q in queries for _ in range(generations)],
                            id=[str(q) for q in queries for _ in range(generations)]))
        r = r.reshape(prompts, generations)
        advantage = (r - r.mean(axis=1, keepdims=True)) / (r.std(axis=1, keepdims=True) + 1e-4)
        grad_log_prob = np.where(refused, 1.0 - refuse_prob, -refuse_prob)
        logit += lr * float((advantage * grad_log_prob).mean())
        rates.append(reward.last.refusal_rate)
    return logit, rates


def settled(rates: list[float]) -> float:
    return float(np.mean(rates[-50:]))


def test_static_reward_drives_refusal_to_one_and_the_penalty_pulls_it_back():
    collapsed, static_rates = train(RewardConfig(kind="static", static_reward=0.9))
    assert settled(static_rates) >= 0.9  # refusing pays 0.9, answering 0.5 on average

    # From the collapsed policy, AWA brings the rate back near the expected one. The penalty is a
    # proportional controller, so the rate settles a little short of the target (about 0.3 here).
    _, awa_rates = train(RewardConfig(), logit=collapsed, seed=1)
    assert settled(awa_rates) == pytest.approx(EXPECTED, abs=0.25)
    assert abs(settled(awa_rates) - EXPECTED) < abs(settled(static_rates) - EXPECTED) / 2


def test_without_the_penalty_the_rate_runs_away_from_the_expected_one():
    # R_base averages below p here, so shaping alone drives refusals out; the penalty holds the
    # rate near the expected one.
    _, plain = train(RewardConfig(delta=0.0), seed=2)
    _, dynamic = train(RewardConfig(), seed=2)
    assert settled(plain) < 0.1
    assert settled(dynamic) == pytest.approx(EXPECTED, abs=0.25)
    assert settled(dynamic) - settled(plain) > 0.15
