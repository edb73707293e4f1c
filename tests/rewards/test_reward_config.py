"""RewardConfig: defaults, YAML loading, and rejection of bad values with reason and fix."""

from __future__ import annotations

import pytest

from awarl.rewards import RewardConfig, RewardConfigError
from awarl.rewards.config import field_help


def test_defaults_are_the_documented_ones():
    cfg = RewardConfig()
    assert (cfg.kind, cfg.cite_on, cfg.judge) == ("awa", "correct", "gold")
    assert (cfg.p_clip, cfg.gamma, cfg.beta, cfg.tau, cfg.delta, cfg.max_penalty) == (0.1, 0.5, 0.9, 0.05, 0.1, 1.0)
    assert (cfg.w_cite, cfg.w_red, cfg.cap_abstain) == (0.2, 0.5, True)
    assert cfg.abstain_cap == pytest.approx(1 - 0.1 ** 0.5)


def test_every_field_has_help():
    helps = field_help()
    assert set(helps) == set(RewardConfig().to_dict())
    assert all(len(text) > 10 for text in helps.values())


@pytest.mark.parametrize("values, field", [
    ({"gamma": 0.0}, "gamma"),
    ({"gamma": 1.5}, "gamma"),
    ({"p_clip": 1.0}, "p_clip"),
    ({"p_clip": -0.1}, "p_clip"),
    ({"tau": 0.0}, "tau"),
    ({"beta": 1.0}, "beta"),
    ({"delta": -0.1}, "delta"),
    ({"max_penalty": -1}, "max_penalty"),
    ({"r_correct": 0.0, "r_wrong": 0.0}, "r_correct"),
    ({"kind": "dynamic"}, "kind"),
    ({"cite_on": "wrong"}, "cite_on"),
    ({"judge": "human"}, "judge"),
    ({"gamma": "0.5"}, "gamma"),
    ({"cap_abstain": "yes"}, "cap_abstain"),
    ({"judge_concurrency": 0}, "judge_concurrency"),
    ({"judge": "llm"}, "judge_base_url"),
    ({"judge": "llm", "judge_base_url": "http://127.0.0.1:1/v1", "judge_model": "m"}, "corpus_path"),
])
def test_bad_values_are_rejected_with_field_and_fix(values, field):
    with pytest.raises(RewardConfigError) as err:
        RewardConfig.from_dict(values)
    assert f"'{field}'" in str(err.value)
    assert ":" in str(err.value).split(field, 1)[1]  # a reason, then the fix


def test_unknown_key_suggests_the_closest():
    with pytest.raises(RewardConfigError, match="did you mean 'gamma'"):
        RewardConfig.from_dict({"gama": 0.5})


def test_from_yaml_reads_the_reward_section(tmp_path):
    path = tmp_path / "train.yaml"
    path.write_text("model: tiny\nreward:\n  kind: static\n  static_reward: 0.3\n  gamma: 1\n")
    cfg = RewardConfig.from_yaml(path)
    assert (cfg.kind, cfg.static_reward, cfg.gamma) == ("static", 0.3, 1.0)
    assert isinstance(cfg.gamma, float)


@pytest.mark.parametrize("moved, to", [("outcome", "rollout.metric"), ("refusal_phrases", "rollout.refusal_phrases")])
def test_fields_that_define_the_agent_moved_to_the_rollout_settings(moved, to):
    """What counts as correct and as an abstention is declared once, in the rollout settings."""
    with pytest.raises(RewardConfigError, match=f"'{moved}' moved to '{to}'"):
        RewardConfig.from_dict({moved: "em" if moved == "outcome" else ["no idea"]})


def test_from_yaml_names_the_file_on_error(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("reward:\n  tau: -1\n")
    with pytest.raises(RewardConfigError, match="bad.yaml.*'tau'"):
        RewardConfig.from_yaml(path)
