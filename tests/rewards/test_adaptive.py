"""The adaptive p_i ratchet: exact lower bounds, never lower, not raised by noise, resumable, read by the reward."""

from __future__ import annotations

import json

import numpy as np
import pytest

from awarl.protocol import ABSTAIN_PHRASE
from awarl.rewards import AnswerAbstainReward, RewardConfig
from awarl.rewards.adaptive import CapabilityRatchet, binomial_lower, round_alpha

ABSTAIN = [{"role": "assistant", "content": f"<answer>{ABSTAIN_PHRASE}</answer>"}]
WRONG = [{"role": "assistant", "content": "<answer>other</answer>"}]


def test_lower_bound_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    for n in (1, 4, 20, 400):
        for c in range(1, n + 1, max(1, n // 7)):
            for alpha in (0.05, 1e-3, 1e-5):
                assert binomial_lower(c, n, alpha) == pytest.approx(stats.beta.ppf(alpha, c, n - c + 1), abs=1e-9)


def test_round_alphas_sum_to_alpha():
    assert sum(round_alpha(0.05, r) for r in range(1, 100_000)) == pytest.approx(0.05, rel=1e-4)


def test_the_ratchet_never_lowers_a_p():
    rng = np.random.default_rng(0)
    ratchet = CapabilityRatchet(0.05)
    last = {q: 0.2 for q in "abc"}
    for _ in range(40):
        counts = {q: (int(rng.integers(0, 5)), 4) for q in "abc"}
        ratchet.update(counts, {q: 0.2 for q in "abc"})
        now = {q: ratchet.p(q, 0.2) for q in "abc"}
        assert all(now[q] >= last[q] for q in "abc")
        last = now


def simulate(true_p: float, seed: int, rounds: int = 30, k: int = 4) -> tuple[float, float]:
    """A policy of fixed capability probed ``rounds`` times: (the ratchet's p_i, the max of the K-sample estimates)."""
    rng = np.random.default_rng(seed)
    ratchet, naive = CapabilityRatchet(0.05), 0.0
    for _ in range(rounds):
        correct = int(rng.binomial(k, true_p))
        ratchet.update({"q": (correct, k)}, {"q": 0.0})
        naive = max(naive, correct / k)
    return ratchet.p("q", 0.0), naive


@pytest.mark.parametrize("true_p", [0.1, 0.3, 0.6])
def test_noise_does_not_raise_p_above_a_fixed_capability(true_p):
    """Over 200 simulated runs of 30 probes, p_i ends above the true rate in at most 5% of them (the design
    bound alpha); raising to each probe's estimate would end far above it."""
    runs = [simulate(true_p, seed) for seed in range(200)]
    over = np.mean([p > true_p for p, _ in runs])
    assert over <= 0.05
    assert np.mean([naive for _, naive in runs]) > true_p + 0.3


def test_a_policy_that_learns_raises_its_p():
    rng = np.random.default_rng(1)
    ratchet = CapabilityRatchet(0.05)
    for r in range(30):
        ratchet.update({"q": (int(rng.binomial(8, 0.0 if r < 5 else 0.9)), 8)}, {"q": 0.0})
    assert 0.6 < ratchet.p("q", 0.0) < 0.9


def test_the_ratchet_survives_a_resume_through_json():
    counts = [{"a": (3, 4), "b": (0, 4)}, {"a": (4, 4), "b": (1, 4)}, {"a": (2, 4), "b": (4, 4)}]
    base = {"a": 0.1, "b": 0.0}
    whole = CapabilityRatchet(0.05)
    for c in counts:
        whole.update(c, base)
    first = CapabilityRatchet(0.05)
    first.update(counts[0], base)
    resumed = CapabilityRatchet(0.05)
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    for c in counts[1:]:
        resumed.update(c, base)
    assert resumed.state_dict() == whole.state_dict()
    with pytest.raises(ValueError, match="adaptive p_i state: malformed"):
        resumed.load_state_dict({"counts": {}})


def test_rolling_subset_covers_every_question():
    ratchet = CapabilityRatchet()
    ids = [f"q{i}" for i in range(5)]
    seen = []
    for _ in range(5):
        seen += ratchet.subset(ids, 2)
        ratchet.update({}, {})
    assert set(seen) == set(ids) and seen[:4] == ["q0", "q1", "q2", "q3"]


def test_the_reward_reads_the_raised_p_and_the_expected_rate_follows():
    reward = AnswerAbstainReward(RewardConfig(adaptive_p=True, delta=0.0))
    kw = dict(answers=[["gold"]] * 2, p=[0.0, 0.0], id=["a", "b"])
    out = reward([[]] * 2, [ABSTAIN, WRONG], **kw)
    assert reward.last.expected_refusal_rate == 1.0 and out[0] == pytest.approx(1 - 0.1 ** 0.5)
    reward.adaptive.update({"a": (32, 32), "b": (32, 32)}, {"a": 0.0, "b": 0.0})  # what a probe does
    step = reward.penalty.state.step
    out = reward([[]] * 2, [ABSTAIN, WRONG], **kw)
    raised = reward.adaptive.p("a", 0.0)
    assert raised > 0.8 and out[0] == pytest.approx(1 - raised ** 0.5)
    assert reward.last.expected_refusal_rate == 0.0 and reward.last.p_mean == pytest.approx(raised)
    assert reward.penalty.state.step == step + 1  # the probe itself never moved the penalty
    state = json.loads(json.dumps(reward.state_dict()))
    fresh = AnswerAbstainReward(RewardConfig(adaptive_p=True, delta=0.0))
    fresh.load_state_dict(state)
    assert fresh.adaptive.p("a", 0.0) == raised and fresh.state_dict() == reward.state_dict()
    with pytest.raises(ValueError, match="adaptive p_i state"):
        AnswerAbstainReward(RewardConfig()).load_state_dict(state)
    with pytest.raises(ValueError, match="column 'id'"):
        reward([[]], [ABSTAIN], answers=[["gold"]], p=[0.0])


def test_the_probe_refuses_zero3():
    from types import SimpleNamespace

    from awarl.config_fields import ConfigError
    from awarl.train.grpo import _check_probe_can_generate

    def trainer(stage):
        plugin = None if stage is None else SimpleNamespace(zero_stage=stage)
        return SimpleNamespace(accelerator=SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=plugin)))

    _check_probe_can_generate(trainer(None))
    _check_probe_can_generate(trainer(2))
    with pytest.raises(ConfigError, match="ZeRO-3"):
        _check_probe_can_generate(trainer(3))
