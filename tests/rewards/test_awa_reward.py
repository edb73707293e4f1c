"""The answer/abstain reward and the gold citation reward, called the way TRL calls them."""

from __future__ import annotations

import math
import pickle
import subprocess
import sys

import pytest

from awarl.agent.settings import RolloutSettings

from awarl.protocol import ABSTAIN_PHRASE, build_messages
from awarl.rewards import (
    AnswerAbstainReward,
    CitationReward,
    RewardConfig,
    answer_abstain_reward,
    build_reward_funcs,
    refusal_base_reward,
)


def said(text: str) -> list[dict]:
    """A conversational completion whose final assistant message is ``text``."""
    return [{"role": "assistant", "content": text}]


ABSTAIN = said(f"<answer>{ABSTAIN_PHRASE}</answer>")


class Env:
    """What the reward reads from a SearchEnv: the queries made and passages returned."""

    def __init__(self, queries=(), retrieved=()):
        self.queries, self.retrieved = list(queries), [list(r) for r in retrieved]


class Metrics(dict):
    def __call__(self, name, value):
        self.setdefault(name, []).append(value)


def call(reward, completions, **columns):
    n = len(completions)
    prompts = columns.pop("prompts", [build_messages(f"q{i}") for i in range(n)])
    logged = Metrics()
    out = reward(prompts, completions, completion_ids=None, log_metric=logged, **columns)
    return out, logged


def test_awa_rewards_closed_form():
    cfg = RewardConfig(beta=0.0)  # no smoothing: Ē_1 = E_1
    reward = AnswerAbstainReward(cfg)
    completions = [said("<answer>Paris</answer>"), said("<answer>Lyon</answer>"), said("Paris"), ABSTAIN]
    p = [0.9, 0.9, 0.9, 0.04]
    out, logged = call(reward, completions, answers=[["Paris"]] * 4, p=p)
    # observed = 1/4; expected: only p = 0.04 prefers refusing (R_base 0.684 > 0.04) -> 1/4; E = 0 -> P = 0.
    assert logged["awa/refusal_rate"] == [0.25] and logged["awa/expected_refusal_rate"] == [0.25]
    assert logged["awa/penalty"] == [0.0]
    assert out == pytest.approx([1.0, 0.0, 0.0, 1 - 0.1 ** 0.5])
    # precision = 1/3 (an unparsable reply did not abstain: a wrong answer, as in evaluation), accuracy = 1/4.
    assert logged["awa/precision"] == [pytest.approx(1 / 3)] and logged["awa/accuracy"] == [0.25]
    assert logged["awa/ra_f1"] == pytest.approx([2 * (1 / 3) * 0.25 / (1 / 3 + 0.25)])


def test_outcome_column_for_the_completions_table():
    extra: dict = {}
    reward = AnswerAbstainReward(RewardConfig())
    reward([[]] * 3, [said("<answer>x</answer>"), said("x"), ABSTAIN], answers=[["x"]] * 3, p=[0.5] * 3,
           log_extra=extra.__setitem__)
    assert extra == {"outcome": ["correct", "unparsable", "abstain"]}


def test_over_refusal_lowers_the_abstain_reward_down_to_the_floor():
    # Everyone abstains on easy queries: observed 1, expected 0 -> Ē = 1 -> P = min(1, 0.1 * 20) = 1.
    unfloored = AnswerAbstainReward(RewardConfig(beta=0.0, tau=0.05, delta=0.1, floor_abstain=False))
    out, logged = call(unfloored, [ABSTAIN] * 4, answers=[["x"]] * 4, p=[0.81] * 4)
    assert logged["awa/E"] == [1.0] and logged["awa/penalty"] == [1.0]
    assert out == pytest.approx([refusal_base_reward(0.81, 0.1, 0.5) - 1.0] * 4)  # 0.1 - 1 = -0.9: the paper's form
    assert logged["awa/abstain_floored"] == [0.0]
    # The default floor: abstaining never pays less than a wrong answer (r_wrong = 0).
    floored = AnswerAbstainReward(RewardConfig(beta=0.0, tau=0.05, delta=0.1))
    out, logged = call(floored, [ABSTAIN] * 4, answers=[["x"]] * 4, p=[0.81] * 4)
    assert out == [0.0] * 4 and logged["awa/abstain_floored"] == [1.0]


def test_cap_holds_the_abstain_reward_below_a_correct_answer():
    # Under-refusal on hard queries: P < 0 lifts the abstain reward; the cap stops it at 1 - p_clip^gamma.
    completions = [said("<answer>x</answer>")] * 7 + [ABSTAIN]
    kw = dict(answers=[["x"]] * 8, p=[0.0] * 8)
    capped, _ = call(AnswerAbstainReward(RewardConfig(beta=0.0)), completions, **kw)
    uncapped, logged = call(AnswerAbstainReward(RewardConfig(beta=0.0, cap_abstain=False, anti_windup="off")),
                            completions, **kw)
    assert logged["awa/penalty"] == [-1.0]
    assert capped[-1] == pytest.approx(1 - 0.1 ** 0.5)
    assert uncapped[-1] == pytest.approx(1 - 0.1 ** 0.5 + 1.0)
    assert capped[-1] < 1.0 < uncapped[-1]


def test_penalty_moves_once_per_call_and_frozen_holds_it():
    reward = AnswerAbstainReward(RewardConfig())
    kw = dict(answers=[["x"]] * 2, p=[0.9, 0.9])
    call(reward, [ABSTAIN, ABSTAIN], **kw)
    assert reward.penalty.state.step == 1
    assert reward.penalty.state.error_ema == pytest.approx(0.1)
    reward.frozen = True
    call(reward, [ABSTAIN, ABSTAIN], **kw)
    assert reward.penalty.state.step == 1 and reward.last.updated is False
    reward.frozen = False
    call(reward, [ABSTAIN, ABSTAIN], **kw)
    assert reward.penalty.state.step == 2 and reward.penalty.state.error_ema == pytest.approx(0.19)


def test_abstain_requires_search():
    reward = AnswerAbstainReward(RewardConfig(abstain_requires_search=True))
    envs = [Env(), Env(queries=["who"]), Env(queries=["a", "b"])]
    out, logged = call(reward, [ABSTAIN, ABSTAIN, said("<answer>x</answer>")], answers=[["x"]] * 3,
                       p=[0.0] * 3, environments=envs)
    assert out[0] == 0.0 and out[1] == pytest.approx(1 - 0.1 ** 0.5 - reward.penalty.value)
    assert logged["env/searches_per_rollout"] == [1.0]
    with pytest.raises(ValueError, match="environments"):
        call(reward, [ABSTAIN], answers=[["x"]], p=[0.0])


def test_f1_outcome_gives_partial_credit():
    reward = AnswerAbstainReward(RewardConfig(r_correct=1.0, r_wrong=-1.0), RolloutSettings(metric="f1"))
    out, _ = call(reward, [said("<answer>Obama</answer>")], answers=[["Barack Obama"]], p=[0.5])
    # token F1 = 2 * (1 * 1/2) / (1 + 1/2) = 2/3 -> -1 + 2 * 2/3.
    assert out == pytest.approx([-1 + 2 * (2 / 3)])


def test_unanswerable_question_answer_is_wrong():
    reward = AnswerAbstainReward(RewardConfig())
    out, _ = call(reward, [said("<answer>x</answer>")], answers=[["x"]], answerable=[False], p=[0.5])
    assert out == [0.0]


def test_all_abstain_groups_come_from_ids():
    reward = AnswerAbstainReward(RewardConfig())
    completions = [ABSTAIN, ABSTAIN, ABSTAIN, said("<answer>x</answer>")]
    _, logged = call(reward, completions, answers=[["x"]] * 4, p=[0.5] * 4, id=["a", "a", "b", "b"])
    assert logged["awa/all_abstain_groups"] == [0.5]


def test_missing_or_bad_columns_are_named():
    reward = AnswerAbstainReward(RewardConfig())
    with pytest.raises(ValueError, match="column 'p'"):
        call(reward, [ABSTAIN], answers=[["x"]])
    with pytest.raises(ValueError, match="'p', rollout 1"):
        call(reward, [ABSTAIN, ABSTAIN], answers=[["x"]] * 2, p=[0.5, 1.5])
    with pytest.raises(ValueError, match="column 'answers'"):
        call(reward, [ABSTAIN], p=[0.5])
    with pytest.raises(ValueError, match="'answers', rollout 0"):
        call(reward, [ABSTAIN], answers=["x"], p=[0.5])


def test_p_i_column_is_accepted():
    out, _ = call(AnswerAbstainReward(RewardConfig()), [ABSTAIN], answers=[["x"]], p_i=[0.25])
    assert out == pytest.approx([0.5 - 0.0])  # first batch: E = 1 - 1 = 0 -> P = 0


def test_state_dict_and_pickle_keep_the_penalty():
    reward = AnswerAbstainReward(RewardConfig(beta=0.0))
    call(reward, [ABSTAIN] * 2, answers=[["x"]] * 2, p=[0.9] * 2)
    clone = pickle.loads(pickle.dumps(reward))
    assert clone.__name__ == "awa_reward" and clone.state_dict() == reward.state_dict()
    fresh = AnswerAbstainReward(RewardConfig(beta=0.0))
    fresh.load_state_dict(reward.state_dict())
    assert fresh.penalty.value == reward.penalty.value == 1.0


def test_build_reward_funcs():
    funcs, weights = build_reward_funcs(RewardConfig())
    assert [f.__name__ for f in funcs] == ["awa_reward", "citation_reward"] and weights == [1.0, 0.2]
    assert answer_abstain_reward(funcs) is funcs[0]
    assert [f.__name__ for f in pickle.loads(pickle.dumps(funcs))] == ["awa_reward", "citation_reward"]
    funcs, weights = build_reward_funcs(RewardConfig(kind="ternary", judge="off"))
    assert [f.__name__ for f in funcs] == ["ternary_reward"] and weights == [1.0]


def test_gold_citation_reward():
    cite = CitationReward(RewardConfig(w_red=0.5, cite_on="answered"))
    completions = [said("<answer>x</answer> [d1] [d2]"), said("<answer>x</answer> [d1] [d9]"),
                   ABSTAIN, said("<answer>x</answer>"), said("<answer>y</answer> [d1]")]
    supporting = [["d1", "d2"], ["d1", "d2"], ["d1"], ["d1"], []]
    out, logged = call(cite, completions, supporting=supporting)
    # full coverage; half coverage + half redundancy; abstain: none; no citation: 0; no gold: not judged.
    assert out == [1.0, 0.5 - 0.25, None, 0.0, None]
    assert logged["cite/coverage"] == pytest.approx([(1 + 0.5 + 0) / 3])
    assert logged["cite/redundancy"] == pytest.approx([(0 + 0.5 + 0) / 3])
    assert logged["cite/judged"] == pytest.approx([3 / 4]) and logged["cite/judge_failures"] == [0.0]
    with pytest.raises(ValueError, match="supporting"):
        call(cite, completions)


def test_citations_pay_correct_answers_only_by_default():
    """Paid on every answer, a wrong answer citing both gold passages would earn 0.2, more than abstaining
    on a p = 0.7 query (1 - 0.7^0.5 = 0.16): the citation term must not tip the answer/abstain balance."""
    funcs, weights = build_reward_funcs(RewardConfig())
    awa, cite = funcs
    completions = [said("<answer>x</answer> [d1] [d2]"), said("<answer>y</answer> [d1] [d2]"), ABSTAIN]
    columns = dict(answers=[["x"]] * 3, supporting=[["d1", "d2"]] * 3, p=[0.7] * 3)
    total = [a + w * (c or 0.0) for a, c, w in zip(call(awa, completions, **columns)[0],
                                                     call(cite, completions, **columns)[0], [weights[1]] * 3)]
    assert total[0] == pytest.approx(1.2) and total[1] == 0.0 < total[2]
    ablation, _ = build_reward_funcs(RewardConfig(cite_on="answered"))
    assert call(ablation[1], completions, **columns)[0][:2] == [1.0, 1.0]


def test_expected_rate_counts_the_citation_term():
    """The expected-rate threshold uses the correct-answer reward including the batch's mean citation
    term, so the controller aims at the rate the rewards favour."""
    funcs, _ = build_reward_funcs(RewardConfig(gamma=1.0))
    awa = funcs[0]
    # p = 0.48: without citations answering is worth 0.48 < R_base = 0.52 (refuse); with the citation term
    # of the correct answers (0.2 * 1.0) answering is worth 0.48 * 1.2 = 0.576 > 0.52 (answer).
    completions = [said("<answer>x</answer> [d1]"), said("<answer>y</answer>"), ABSTAIN, ABSTAIN]
    _, logged = call(awa, completions, answers=[["x"]] * 4, supporting=[["d1"]] * 4, p=[0.48] * 4)
    assert logged["awa/answer_value_correct"] == [pytest.approx(1.2)]
    assert logged["awa/expected_refusal_rate"] == [0.0]
    plain = AnswerAbstainReward(RewardConfig(gamma=1.0, w_cite=0.0))
    _, logged = call(plain, completions, answers=[["x"]] * 4, p=[0.48] * 4)
    assert logged["awa/expected_refusal_rate"] == [1.0]


def test_share_of_capped_abstentions_is_logged():
    reward = AnswerAbstainReward(RewardConfig(delta=1.0, tau=0.05, beta=0.0, anti_windup="off"))
    # Everyone answers wrongly on hopeless queries: under-refusal, so P_t < 0 lifts abstention above the cap.
    call(reward, [said("<answer>y</answer>")] * 4, answers=[["x"]] * 4, p=[0.0] * 4)
    _, logged = call(reward, [ABSTAIN, said("<answer>y</answer>")], answers=[["x"]] * 2, p=[0.0] * 2)
    assert reward.penalty.value < 0 and logged["awa/abstain_capped"] == [1.0]


def test_rewards_never_import_torch():
    code = ("import sys; from awarl.rewards import RewardConfig, build_reward_funcs; "
            "f, _ = build_reward_funcs(RewardConfig()); "
            "m = [{'role': 'assistant', 'content': '<answer>x</answer> [d1]'}]; "
            "f[0]([[]], [m], answers=[['x']], p=[0.5], supporting=[['d1']]); "
            "f[1]([[]], [m], answers=[['x']], supporting=[['d1']]); "
            "assert 'torch' not in sys.modules and 'accelerate' not in sys.modules, 'torch imported'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_nan_free_rewards_for_every_outcome():
    reward = AnswerAbstainReward(RewardConfig())
    completions = [said("<answer>x</answer>"), said("<answer>y</answer>"), said(""), ABSTAIN, said("<answer></answer>")]
    out, _ = call(reward, completions, answers=[["x"]] * 5, p=[0.3] * 5)
    assert all(isinstance(v, float) and math.isfinite(v) for v in out)
    assert out[4] == 0.0  # an empty answer is a wrong answer, never an abstention
