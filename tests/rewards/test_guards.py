"""The controller's guards: floor, anti-windup, attempt bonus, collapse diagnostics, and the two closed holes."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from awarl.agent.settings import RolloutSettings
from awarl.protocol import ABSTAIN_PHRASE, hedges, parse_final, score
from awarl.rewards import AnswerAbstainReward, CitationReward, RewardConfig, expected_refusal_rate
from awarl.rewards.kinds import awa_abstain

ABSTAIN = [{"role": "assistant", "content": f"<answer>{ABSTAIN_PHRASE}</answer>"}]
RIGHT = [{"role": "assistant", "content": "<answer>gold</answer>"}]
WRONG = [{"role": "assistant", "content": "<answer>other</answer>"}]


def said(text: str) -> list[dict]:
    return [{"role": "assistant", "content": text}]


def batch(reward, completions, p, ids=None, **kw):
    n = len(completions)
    logged: dict = {}
    out = reward([[]] * n, completions, answers=[["gold"]] * n, p=p, id=ids or [str(i) for i in range(n)],
                 log_metric=lambda k, v: logged.__setitem__(k, v), **kw)
    return out, logged


# ---- floor ------------------------------------------------------------------------------------------------

@given(p=st.floats(0.0, 1.0), penalty=st.floats(-1.0, 1.0), r_wrong=st.floats(-1.0, 0.5),
       gamma=st.floats(0.05, 1.0), cap=st.booleans(), bonus=st.booleans())
def test_the_abstain_reward_never_falls_below_r_wrong(p, penalty, r_wrong, gamma, cap, bonus):
    cfg = RewardConfig(r_wrong=r_wrong, gamma=gamma, cap_abstain=cap, attempt_bonus=bonus)
    assert awa_abstain(cfg, p, penalty).value >= r_wrong  # the bonus paid to answers does not raise the floor


def test_the_unfloored_form_pays_hallucination_over_abstention():
    """The issue's group on an unanswerable question at P = +0.7: {abstain, wrong, wrong, wrong}."""
    completions = [ABSTAIN, WRONG, WRONG, WRONG]
    for floor, sign in ((False, -1), (True, 0)):
        reward = AnswerAbstainReward(RewardConfig(floor_abstain=floor))
        reward.penalty.state.penalty = 0.7
        reward.frozen = True  # use P = 0.7 as it is
        out, logged = batch(reward, completions, p=[0.0] * 4, ids=["q"] * 4, answerable=[False] * 4)
        r = np.array(out)
        advantage = (r[0] - r.mean()) / (r.std() + 1e-4)
        assert np.sign(round(advantage, 6)) == sign
        assert logged["awa/abstain_floored"] == float(floor)


# ---- anti-windup ------------------------------------------------------------------------------------------

HARD, EASY = 0.05, 0.9
P_BATCH = [HARD] * 72 + [EASY] * 28  # expected refusal rate 0.72: every hard query prefers refusing


def windup_batch(abstain_hard: int, abstain_easy: int = 0) -> list:
    """100 rollouts over P_BATCH: the first ``abstain_hard`` hard and ``abstain_easy`` easy ones abstain."""
    out = [ABSTAIN if i < abstain_hard else WRONG for i in range(72)]
    return out + [ABSTAIN if i < abstain_easy else RIGHT for i in range(28)]


def run_windup(cfg: RewardConfig, below: int = 60, after: int = 30):
    """``below`` batches refusing 0.22 against 0.72, then batches refusing 0.80 (the error flips to +0.08).
    Returns the penalties, the smallest abstain reward paid, and the batches after the flip until P_t >= 0."""
    reward = AnswerAbstainReward(cfg)
    penalties, lowest = [], np.inf
    for t in range(below + after):
        completions = windup_batch(22) if t < below else windup_batch(72, 8)
        out, _ = batch(reward, completions, P_BATCH)
        lowest = min(lowest, min(r for r, c in zip(out, completions) if c is ABSTAIN))
        penalties.append(reward.penalty.value)
    recovered = next(i + 1 for i, value in enumerate(penalties[below:]) if value >= 0)
    return penalties, lowest, recovered, reward


def test_unguarded_controller_winds_up_and_recovers_slowly():
    penalties, _, recovered, _ = run_windup(RewardConfig(anti_windup="off"))
    assert penalties[59] == min(penalties) == -0.9  # Ē -> E = -0.5; the capped queries see a static reward
    assert recovered > 10


def test_freeze_holds_a_negative_penalty_while_the_cap_binds_and_recovers_fast():
    cfg = RewardConfig(anti_windup="freeze")
    penalties, lowest, recovered, reward = run_windup(cfg)
    assert set(penalties[1:60]) == {-0.1}  # frozen from the second batch: every abstention is at the cap
    assert reward.penalty.recovery_batches(-0.05) == 1 and recovered == 1
    assert lowest >= cfg.r_wrong


def test_bound_keeps_the_penalty_at_min_penalty_and_recovers_within_the_stated_batches():
    cfg = RewardConfig(anti_windup="bound", min_penalty=-0.2)
    penalties, lowest, recovered, reward = run_windup(cfg)
    assert min(penalties) == -0.2 and penalties[59] == -0.2
    assert recovered <= reward.penalty.recovery_batches() == 7 <= 10
    assert lowest >= cfg.r_wrong


@pytest.mark.parametrize("error", [1e-6, 0.01, 0.08, 0.5])
def test_bound_recovery_holds_for_any_non_negative_error(error):
    from awarl.rewards import DynamicPenalty

    pen = DynamicPenalty(0.9, 0.05, 0.1, 1.0, min_penalty=-0.2)
    for _ in range(200):
        pen.update(0.0, 1.0)
    assert pen.value == -0.2
    steps = next(n for n in range(1, 50) if pen.update(error, 0.0) >= 0)
    assert steps <= pen.recovery_batches() == 7


def test_freeze_does_not_hold_when_the_cap_binds_on_few_abstentions():
    """Abstentions on p = 0.5 queries are not at the cap at P = -0.1: the controller keeps integrating."""
    reward = AnswerAbstainReward(RewardConfig(anti_windup="freeze"))
    for _ in range(3):  # 0.293 + 0.2 < the cap 0.684 up to the third batch
        _, logged = batch(reward, [ABSTAIN] * 2 + [WRONG] * 8, [0.5] * 2 + [HARD] * 8)
        assert logged["awa/windup_held"] == 0.0
    assert reward.penalty.value == pytest.approx(-0.3)


def test_penalty_state_round_trips_with_the_guards():
    reward = AnswerAbstainReward(RewardConfig(anti_windup="freeze"))
    batch(reward, windup_batch(22), P_BATCH)
    fresh = AnswerAbstainReward(RewardConfig(anti_windup="freeze"))
    fresh.load_state_dict(reward.state_dict())
    a, _ = batch(reward, windup_batch(22), P_BATCH)
    b, _ = batch(fresh, windup_batch(22), P_BATCH)
    assert a == b and fresh.state_dict() == reward.state_dict()


# ---- attempt bonus ----------------------------------------------------------------------------------------

def test_attempt_bonus_pays_parsable_answers_by_capability():
    cfg = RewardConfig(attempt_bonus=True, attempt_bonus_lambda=0.1, delta=0.0)
    reward = AnswerAbstainReward(cfg)
    completions = [RIGHT, WRONG, WRONG, said("no tags"), ABSTAIN]
    out, logged = batch(reward, completions, [0.25, 0.25, 0.0, 0.25, 0.25])
    assert out == pytest.approx([1.05, 0.05, 0.0, 0.0, 0.5])  # 0.1 * 0.25^0.5; none where p = 0 or unparsable
    assert logged["awa/attempt_bonus"] == pytest.approx(0.1 / 3)
    off, logged = batch(AnswerAbstainReward(RewardConfig(delta=0.0)), completions, [0.25, 0.25, 0.0, 0.25, 0.25])
    assert off == pytest.approx([1.0, 0.0, 0.0, 0.0, 0.5]) and "awa/attempt_bonus" not in logged


def test_attempt_bonus_moves_the_expected_rate():
    # p = 0.3, gamma 0.5: R_base = 0.452 > 0.3 (refuse); with lambda 0.3 answering is worth 0.3 + 0.164 = 0.464.
    assert expected_refusal_rate([0.3], 0.1, 0.5) == 1.0
    assert expected_refusal_rate([0.3], 0.1, 0.5, attempt_bonus=0.3) == 0.0
    _, logged = batch(AnswerAbstainReward(RewardConfig(attempt_bonus=True, attempt_bonus_lambda=0.3)), [WRONG], [0.3])
    assert logged["awa/expected_refusal_rate"] == 0.0


# ---- forced answers ---------------------------------------------------------------------------------------

class Env:
    """What the reward reads of a SearchEnv: its searches and whether the rollout was forced."""

    def __init__(self, forced: bool = False):
        self.queries, self.forced_answer = ["q"], forced


def test_a_forced_answer_earns_its_reward_but_counts_as_the_abstention_it_replaced():
    """Group a sampled {abstain x4} and got one forced answer (right); group b is a sampled mix."""
    completions = [RIGHT, ABSTAIN, ABSTAIN, ABSTAIN, RIGHT, WRONG, ABSTAIN, RIGHT]
    ids = ["a"] * 4 + ["b"] * 4
    envs = [Env(forced=True)] + [Env() for _ in range(7)]
    reward = AnswerAbstainReward(RewardConfig(forced_answer=True, w_cite=0.0))
    out, logged = batch(reward, completions, [0.5] * 8, ids=ids, environments=envs)
    assert out[0] == 1.0 and out[1] == out[2] == out[3] < 1.0  # the forced answer pays as an answer
    assert logged["awa/refusal_rate"] == 5 / 8  # the policy sampled 5 abstentions
    assert logged["awa/precision"] == 2 / 3 and logged["awa/accuracy"] == 2 / 8
    assert logged["awa/all_abstain_groups"] == 0.5  # group a, as sampled
    assert logged["awa/zero_advantage_groups"] == 0.0  # as trained, group a has a gradient
    assert logged["awa/forced_answers"] == 0.5 and logged["awa/forced_correct"] == 1.0
    assert reward.penalty.state.step == 1
    unforced = AnswerAbstainReward(RewardConfig(forced_answer=True, w_cite=0.0))
    _, plain = batch(unforced, [ABSTAIN] + completions[1:], [0.5] * 8, ids=ids, environments=[Env() for _ in range(8)])
    assert plain["awa/refusal_rate"] == logged["awa/refusal_rate"] and plain["awa/penalty"] == logged["awa/penalty"]
    assert plain["awa/forced_answers"] == 0.0 and "awa/forced_correct" not in plain


def test_the_forced_rollout_is_the_first_of_each_all_abstain_group_across_processes():
    from awarl.train.forced import forced_rollouts

    # (rank, index, group, abstained): group 7 spans both ranks; 8 has an answer; 9 is a single rollout
    flags = [(1, 0, 7, True), (0, 1, 7, True), (0, 0, 8, True), (1, 1, 8, False), (1, 2, 9, True),
             (0, 2, 6, True), (1, 3, 6, True)]
    assert forced_rollouts(flags) == [(0, 1), (0, 2)]
    assert forced_rollouts([(0, i, 1, False) for i in range(4)]) == []


# ---- collapse diagnostics ---------------------------------------------------------------------------------

def test_group_shares_are_logged_from_the_whole_batch():
    reward = AnswerAbstainReward(RewardConfig(delta=0.0, w_cite=0.0))
    completions = [ABSTAIN, ABSTAIN, RIGHT, WRONG, ABSTAIN, RIGHT, RIGHT, WRONG, WRONG]
    ids = ["a", "a", "b", "b", "b", "c", "c", "d", "d"]
    _, logged = batch(reward, completions, [0.5] * 9, ids=ids)
    assert logged["awa/all_abstain_groups"] == 0.25       # a
    assert logged["awa/zero_advantage_groups"] == 0.75    # a, c, d: equal rewards
    assert logged["awa/three_outcome_groups"] == 0.25     # b
    assert logged["awa/abstain_capped"] == 0.0 and logged["awa/abstain_floored"] == 0.0


def test_a_lasting_collapse_warns_loudly_and_survives_a_resume(caplog):
    cfg = RewardConfig(collapse_warn_share=0.9, collapse_warn_batches=3)
    reward = AnswerAbstainReward(cfg)
    ids = [str(i // 2) for i in range(8)]
    with caplog.at_level(logging.WARNING, logger="awarl.rewards.awa"):
        for t in range(2):
            _, logged = batch(reward, [ABSTAIN] * 8, [0.5] * 8, ids=ids)
            assert logged["awa/collapse_warning"] == 0.0
        reward.frozen = True  # evaluation batches do not count
        batch(reward, [ABSTAIN] * 8, [0.5] * 8, ids=ids)
        reward.frozen = False
        resumed = AnswerAbstainReward(cfg)
        resumed.load_state_dict(reward.state_dict())
        _, logged = batch(resumed, [ABSTAIN] * 8, [0.5] * 8, ids=ids)
    assert logged["awa/collapse_warning"] == 1.0 and resumed.collapse_streak == 3
    [record] = [r for r in caplog.records if "REFUSAL COLLAPSE" in r.getMessage()]
    assert "reward.attempt_bonus" in record.getMessage() and "SFT" in record.getMessage()
    _, logged = batch(resumed, [RIGHT] * 8, [0.5] * 8, ids=ids)
    assert logged["awa/collapse_warning"] == 0.0 and resumed.collapse_message is None


def test_a_lasting_format_collapse_warns_and_survives_a_resume(caplog):
    """A policy that only emits malformed tool calls earns one reward on every rollout (zero advantage): the
    reward logs the unparsable share and, when it lasts, a FORMAT COLLAPSE warning, as it does for refusal."""
    from types import SimpleNamespace

    from awarl.train.callbacks import CollapseWarningCallback

    broken = [{"role": "assistant", "content": '<tool_call>\n{"name": "search", "arguments":":":": "born X"}}\n</tool_call>'}]
    cfg = RewardConfig(collapse_warn_share=0.9, collapse_warn_batches=3)
    reward = AnswerAbstainReward(cfg)
    shown: list[str] = []
    callback = CollapseWarningCallback(reward, printer=shown.append)
    state = SimpleNamespace(is_world_process_zero=True)
    ids = [str(i // 2) for i in range(8)]
    _, logged = batch(reward, [broken] * 7 + [RIGHT], [0.5] * 8, ids=ids)
    assert logged["awa/unparsable"] == 7 / 8 and logged["awa/format_collapse_warning"] == 0.0  # 0.875: not above 0.9
    with caplog.at_level(logging.WARNING, logger="awarl.rewards.awa"):
        for t in range(2):
            _, logged = batch(reward, [broken] * 8, [0.5] * 8, ids=ids)
            callback.on_log(None, state, None, logs={})
        assert logged["awa/unparsable"] == 1.0 and logged["awa/format_collapse_warning"] == 0.0 and not shown
        resumed = AnswerAbstainReward(cfg)
        resumed.load_state_dict(reward.state_dict())
        callback.reward = resumed
        _, logged = batch(resumed, [broken] * 8, [0.5] * 8, ids=ids)
        callback.on_log(None, state, None, logs={})
    assert logged["awa/format_collapse_warning"] == 1.0 and resumed.format_streak == 3
    assert logged["awa/collapse_warning"] == 0.0  # no abstention: not a refusal collapse
    [record] = [r for r in caplog.records if "FORMAT COLLAPSE" in r.getMessage()]
    assert "learning_rate" in record.getMessage() and shown == [f"[grpo] {resumed.format_message}"]
    _, logged = batch(resumed, [RIGHT] * 8, [0.5] * 8, ids=ids)
    assert logged["awa/format_collapse_warning"] == 0.0 and resumed.format_message is None
    older = {k: v for k, v in reward.state_dict().items() if k != "format_streak"}  # a checkpoint of an older run
    AnswerAbstainReward(cfg).load_state_dict(older)
    with pytest.raises(ValueError, match="format_streak"):
        AnswerAbstainReward(cfg).load_state_dict({**older, "format_streak": -1})


# ---- the holes --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("answer, f1", [("Morland Ruvia", 2 / 3), ("Morland Ruvia Pelaria", 0.5)])
def test_a_hedged_answer_is_not_f1_correct(answer, f1):
    parsed = parse_final(f"<answer>{answer}</answer>")
    hedged = score(parsed, ["Morland"], metric="f1")
    assert (hedged.outcome, hedged.hedged) == ("wrong", True) and hedged.f1 == pytest.approx(f1)
    assert score(parsed, ["Morland"], metric="em").outcome == "wrong"  # em: unchanged
    assert score(parse_final("<answer>Morland</answer>"), ["Morland"], metric="f1").outcome == "correct"
    reward = AnswerAbstainReward(RewardConfig(delta=0.0), RolloutSettings(metric="f1"))
    out = reward([[]], [said(f"<answer>{answer}</answer>")], answers=[["Morland"]], p=[0.5])
    assert out == [0.0]  # no partial credit for listing candidates


def test_a_shorter_partial_answer_keeps_f1_credit():
    assert not hedges("Shusett", ["Ronald Shusett"])
    result = score(parse_final("<answer>Shusett</answer>"), ["Ronald Shusett"], metric="f1")
    assert (result.outcome, result.hedged) == ("correct", False)
    assert hedges("Ronald Shusett Morland", ["Ronald Shusett"]) and not hedges("Shusett", ["Ronald Shusett", "X"])


@pytest.mark.parametrize("cite_on", ["correct", "answered"])
def test_citations_are_never_paid_on_an_unanswerable_record(cite_on):
    cite = CitationReward(RewardConfig(cite_on=cite_on))
    completions = [said("<answer>gold</answer> [d1]")] * 2
    out = cite([[]] * 2, completions, answers=[["gold"]] * 2, answerable=[False, True], supporting=[["d1"]] * 2)
    assert out == [None, 1.0]


def test_the_collapse_warning_reaches_the_display():
    from types import SimpleNamespace

    from awarl.train.callbacks import CollapseWarningCallback

    reward = AnswerAbstainReward(RewardConfig(collapse_warn_batches=2))
    shown: list[str] = []
    callback = CollapseWarningCallback(reward, printer=shown.append)
    state = SimpleNamespace(is_world_process_zero=True)
    ids = [str(i // 2) for i in range(4)]
    for t in range(5):
        batch(reward, [ABSTAIN] * 4, [0.5] * 4, ids=ids)
        callback.on_log(None, state, None, logs={})
    assert len(shown) == 2 and "REFUSAL COLLAPSE" in shown[0]  # at batch 2 and batch 4
