"""The registry of reward kinds: every kind runs the same way, and the docs table is the registry."""

from __future__ import annotations

import pickle
import re
import typing
from pathlib import Path

import pytest

from awarl.protocol import ABSTAIN_PHRASE
from awarl.rewards import KINDS, AnswerAbstainReward, RewardConfig, build_reward_funcs
from awarl.rewards.config import RewardKind

DOCS = Path(__file__).resolve().parents[2] / "docs" / "rewards.md"


def said(text: str) -> list[dict]:
    return [{"role": "assistant", "content": text}]


COMPLETIONS = [said("<answer>x</answer>"), said("<answer>y</answer>"), said("no tags"),
               said(f"<answer>{ABSTAIN_PHRASE}</answer>"), said(f"<answer>{ABSTAIN_PHRASE}</answer>")]
ANSWERABLE = [True, True, True, True, False]

EXPECTED = {  # correct, wrong, unparsable, abstain (answerable), abstain (unanswerable); static_reward 0.3
    "awa": [1.0, 0.0, 0.0, 0.5, 0.5],  # R_base(0.25); observed = expected = 0.4, so P_t = 0
    "static": [1.0, 0.0, 0.0, 0.3, 0.3],
    "ternary": [1.0, -1.0, -1.0, 0.0, 0.0],
    "none": [1.0, 0.0, 0.0, 0.0, 0.0],
    "unanswerable_only": [1.0, 0.0, 0.0, 0.0, 1.0],
}
"""One row per registry kind: adding a kind to the registry without a row here fails `test_every_kind_has_a_row`."""


def test_every_kind_has_a_row():
    assert set(EXPECTED) == set(KINDS)


def test_reward_kind_is_the_registry():
    assert typing.get_args(RewardKind) == tuple(KINDS)


@pytest.mark.parametrize("name", list(KINDS))
def test_every_kind_scores_every_outcome(name):
    spec = KINDS[name]
    reward = AnswerAbstainReward(RewardConfig(kind=name, static_reward=0.3))
    columns = dict(answers=[["x"]] * 5, answerable=ANSWERABLE)
    if spec.needs_p:
        columns["p"] = [0.9, 0.9, 0.9, 0.25, 0.25]
    logged: dict = {}
    out = reward([[]] * 5, COMPLETIONS, log_metric=lambda k, v: logged.setdefault(k, v), **columns)
    assert out == pytest.approx(EXPECTED[name])
    assert reward.__name__ == spec.reward_name == pickle.loads(pickle.dumps(reward)).__name__
    assert logged["awa/refusal_rate"] == 0.4
    assert ("awa/expected_refusal_rate" in logged) == spec.needs_p
    assert reward.penalty.state.step == int(spec.controlled)
    funcs, _ = build_reward_funcs(RewardConfig(kind=name))
    assert funcs[0].__name__ == spec.reward_name


@pytest.mark.parametrize("name", [n for n, spec in KINDS.items() if spec.needs_p])
def test_kinds_that_read_p_name_the_missing_column(name):
    with pytest.raises(ValueError, match="column 'p'"):
        AnswerAbstainReward(RewardConfig(kind=name))([[]], COMPLETIONS[:1], answers=[["x"]])


def test_the_docs_table_is_the_registry():
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("## Kinds", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \| `([^`]+)` \| (.+?) \|$", section, re.M)
    assert rows == [(s.name, s.reward_name, s.summary) for s in KINDS.values()]
