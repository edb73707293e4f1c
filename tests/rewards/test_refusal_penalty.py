"""Closed forms and properties of R_base, the expected refusal rate and the dynamic penalty."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from awarl.rewards import DynamicPenalty, expected_refusal_rate, refusal_base_reward, refusal_base_rewards

probs = st.floats(0.0, 1.0, allow_nan=False)
gammas = st.floats(0.01, 1.0, allow_nan=False)
clips = st.floats(0.0, 0.99, allow_nan=False)


# ---- R_base = 1 - max(p, p_clip)^gamma -------------------------------------------------------

@pytest.mark.parametrize("p, p_clip, gamma, expected", [
    (0.25, 0.1, 0.5, 0.5),           # 1 - sqrt(0.25)
    (0.04, 0.1, 0.5, 1 - 0.1 ** 0.5),  # clipped up to p_clip
    (0.0, 0.0, 1.0, 1.0),
    (1.0, 0.1, 0.5, 0.0),
    (0.64, 0.1, 0.5, 0.2),
    (0.5, 0.1, 1.0, 0.5),
])
def test_refusal_base_reward_closed_form(p, p_clip, gamma, expected):
    assert refusal_base_reward(p, p_clip, gamma) == pytest.approx(expected)


def test_vectorised_matches_scalar():
    p = np.linspace(0, 1, 101)
    vec = refusal_base_rewards(p, 0.1, 0.3)
    assert vec.tolist() == pytest.approx([refusal_base_reward(x, 0.1, 0.3) for x in p])


@pytest.mark.parametrize("bad", [dict(p=1.2), dict(p=-0.1), dict(p=math.nan), dict(gamma=0.0),
                                 dict(gamma=1.1), dict(p_clip=1.0)])
def test_refusal_base_reward_rejects_bad_input(bad):
    args = dict(p=0.5, p_clip=0.1, gamma=0.5) | bad
    with pytest.raises(ValueError):
        refusal_base_reward(**args)


def test_vectorised_names_the_bad_index():
    with pytest.raises(ValueError, match="index 2"):
        refusal_base_rewards([0.1, 0.2, 1.5], 0.1, 0.5)


@given(p1=probs, p2=probs, p_clip=clips, gamma=gammas)
def test_r_base_decreases_in_p(p1, p2, p_clip, gamma):
    lo, hi = sorted((p1, p2))
    assert refusal_base_reward(lo, p_clip, gamma) >= refusal_base_reward(hi, p_clip, gamma)


@given(p=probs, p_clip=clips, g1=gammas, g2=gammas)
def test_r_base_increases_with_gamma(p, p_clip, g1, g2):
    lo, hi = sorted((g1, g2))
    # x^gamma falls as gamma grows for x in [0, 1], so 1 - x^gamma rises.
    assert refusal_base_reward(p, p_clip, hi) >= refusal_base_reward(p, p_clip, lo) - 1e-12


@given(p=probs, p_clip=clips, gamma=gammas)
def test_r_base_is_bounded_by_the_cap(p, p_clip, gamma):
    value = refusal_base_reward(p, p_clip, gamma)
    assert 0.0 <= value <= 1.0 - p_clip ** gamma + 1e-12


# ---- expected refusal rate ----------------------------------------------------------------------

def test_expected_rate_closed_form():
    # gamma = 0.5, p_clip = 0: refuse iff 1 - sqrt(p) > p  <=>  sqrt(p) < (sqrt(5) - 1) / 2.
    threshold = ((math.sqrt(5) - 1) / 2) ** 2  # 0.381966
    p = [0.0, 0.2, threshold - 1e-6, threshold + 1e-6, 0.5, 0.9, 1.0, 0.1]
    assert expected_refusal_rate(p, 0.0, 0.5) == pytest.approx(4 / 8)


def test_expected_rate_with_gamma_one_is_the_half_threshold():
    # gamma = 1: R_base = 1 - p > p  <=>  p < 0.5, the same as a static refusal reward of 0.5.
    p = np.linspace(0.2, 0.8, 13)  # 0.2, 0.25, ..., 0.8
    assert expected_refusal_rate(p, 0.1, 1.0) == pytest.approx(np.mean(p < 0.5))


def test_expected_rate_uses_the_outcome_rewards():
    # With r_wrong = -1 answering is worth 2p - 1: p = 0.6 is worth 0.2 < R_base = 1 - sqrt(0.6) = 0.225.
    assert expected_refusal_rate([0.6], 0.1, 0.5, r_correct=1.0, r_wrong=-1.0) == 1.0
    assert expected_refusal_rate([0.6], 0.1, 0.5) == 0.0


def test_expected_rate_counts_rollouts_not_queries():
    assert expected_refusal_rate([0.0] * 3 + [1.0], 0.1, 0.5) == pytest.approx(0.75)


@given(p=st.lists(probs, min_size=1, max_size=50), p_clip=clips, g1=gammas, g2=gammas)
def test_expected_rate_grows_with_gamma(p, p_clip, g1, g2):
    lo, hi = sorted((g1, g2))
    assert expected_refusal_rate(p, p_clip, hi) >= expected_refusal_rate(p, p_clip, lo)


# ---- dynamic penalty -------------------------------------------------------------------------

def test_penalty_closed_form_sequence():
    pen = DynamicPenalty(beta=0.5, tau=0.05, delta=0.1, max_penalty=0.25)
    # E_1 = 0.4 -> Ē = 0.2 -> floor(0.2/0.05)=4 steps -> 0.4, capped at 0.25.
    assert pen.update(0.6, 0.2) == pytest.approx(0.25)
    # E_2 = -0.3 -> Ē = 0.5*0.2 + 0.5*(-0.3) = -0.05 -> one step below zero.
    assert pen.update(0.1, 0.4) == pytest.approx(-0.1)
    assert pen.state.error_ema == pytest.approx(-0.05)
    assert pen.state.last_error == pytest.approx(-0.3)
    # E_3 = 0 -> Ē = -0.025: inside the dead zone.
    assert pen.update(0.3, 0.3) == 0.0
    assert pen.state.step == 3


def test_penalty_with_zero_delta_is_off():
    pen = DynamicPenalty(beta=0.0, delta=0.0)
    assert pen.update(1.0, 0.0) == 0.0


@given(beta=st.floats(0.0, 0.99), tau=st.floats(0.001, 0.5), delta=st.floats(0.0, 1.0),
       max_penalty=st.floats(0.0, 2.0), rates=st.lists(st.tuples(probs, probs), min_size=1, max_size=30))
@settings(max_examples=200, deadline=None)
def test_penalty_properties(beta, tau, delta, max_penalty, rates):
    pen = DynamicPenalty(beta, tau, delta, max_penalty)
    for observed, expected in rates:
        value = pen.update(observed, expected)
        ema = pen.state.error_ema
        assert abs(value) <= max_penalty + 1e-12
        if abs(ema) < tau * (1 - 1e-6):
            assert value == 0.0                                    # dead zone
        if value != 0.0:
            assert math.copysign(1.0, value) == math.copysign(1.0, ema)  # sign of Ē
            steps = abs(value) / delta
            assert abs(value) == pytest.approx(max_penalty) or steps == pytest.approx(round(steps))


@given(beta=st.floats(0.0, 0.95), observed=probs, expected=probs)
@settings(deadline=None)  # 600 updates per example; the 2-core CI box is often busy
def test_ema_converges_to_a_constant_input(beta, observed, expected):
    pen = DynamicPenalty(beta=beta)
    for _ in range(600):
        pen.update(observed, expected)
    assert pen.state.error_ema == pytest.approx(observed - expected, abs=1e-9)


@given(rates=st.lists(st.tuples(probs, probs), min_size=1, max_size=10))
def test_state_round_trips(rates):
    a = DynamicPenalty(beta=0.8, tau=0.05, delta=0.1, max_penalty=1.0)
    for observed, expected in rates:
        a.update(observed, expected)
    b = DynamicPenalty(beta=0.8, tau=0.05, delta=0.1, max_penalty=1.0)
    b.load_state_dict(a.state_dict())
    assert b.state == a.state
    assert a.update(0.7, 0.2) == b.update(0.7, 0.2)
    assert a.state == b.state


@pytest.mark.parametrize("state, match", [
    ({"error_ema": 0.1, "penalty": 0.0, "last_error": 0.0}, "missing key 'step'"),
    ({"error_ema": 0.1, "penalty": 0.0, "last_error": 0.0, "step": 1, "x": 2}, "unknown keys"),
    ({"error_ema": "a", "penalty": 0.0, "last_error": 0.0, "step": 1}, "'error_ema' must be a finite number"),
])
def test_bad_state_is_rejected(state, match):
    with pytest.raises(ValueError, match=match):
        DynamicPenalty().load_state_dict(state)


@pytest.mark.parametrize("kwargs", [dict(beta=1.0), dict(tau=0.0), dict(delta=-1.0), dict(max_penalty=-0.1)])
def test_bad_penalty_settings(kwargs):
    with pytest.raises(ValueError):
        DynamicPenalty(**kwargs)


def test_update_rejects_rates_outside_unit_interval():
    with pytest.raises(ValueError, match="observed_rate"):
        DynamicPenalty().update(1.5, 0.2)
