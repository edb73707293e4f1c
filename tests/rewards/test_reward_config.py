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
    assert (cfg.floor_abstain, cfg.anti_windup, cfg.min_penalty, cfg.windup_share) == (True, "freeze", -0.2, 0.8)
    assert (cfg.attempt_bonus, cfg.attempt_bonus_lambda, cfg.adaptive_p) == (False, 0.1, False)
    assert (cfg.collapse_warn_share, cfg.collapse_warn_batches) == (0.9, 10)
    assert cfg.abstain_cap == pytest.approx(1 - 0.1 ** 0.5)


def test_every_field_has_help():
    helps = field_help()
    values = RewardConfig().to_dict()
    judge = values.pop("llm_judge")
    assert set(helps) == set(values) | {f"llm_judge.{k}" for k in judge}
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
    ({"llm_judge": {"concurrency": 0}}, "llm_judge.concurrency"),
    ({"judge": "llm"}, "llm_judge.base_url"),
    ({"judge": "llm", "llm_judge": {"base_url": "http://127.0.0.1:1/v1", "model": "m"}}, "llm_judge.corpus_path"),
    ({"anti_windup": "clamp"}, "anti_windup"),
    ({"min_penalty": 0.1}, "min_penalty"),
    ({"min_penalty": -2.0}, "min_penalty"),
    ({"windup_share": 0.0}, "windup_share"),
    ({"floor_abstain": "yes"}, "floor_abstain"),
    ({"attempt_bonus_lambda": -0.1}, "attempt_bonus_lambda"),
    ({"collapse_warn_batches": 0}, "collapse_warn_batches"),
    ({"adaptive_p_every": 0}, "adaptive_p_every"),
    ({"adaptive_p_alpha": 1.0}, "adaptive_p_alpha"),
])
def test_bad_values_are_rejected_with_field_and_fix(values, field):
    with pytest.raises(RewardConfigError) as err:
        RewardConfig.from_dict(values)
    assert f"'{field}'" in str(err.value)
    assert ":" in str(err.value).split(field, 1)[1]  # a reason, then the fix


def test_unknown_key_suggests_the_closest():
    with pytest.raises(RewardConfigError, match="did you mean 'gamma'"):
        RewardConfig.from_dict({"gama": 0.5})
    with pytest.raises(RewardConfigError, match="did you mean 'model'"):
        RewardConfig.from_dict({"llm_judge": {"modle": "m"}})


@pytest.mark.parametrize("key", ["judge_model", "corpus_path", "outcome"])
def test_judge_and_agent_settings_are_not_reward_keys(key):
    """The LLM judge's settings live in reward.llm_judge; what is correct and what is an abstention in rollout."""
    with pytest.raises(RewardConfigError, match=f"unknown key '{key}'"):
        RewardConfig.from_dict({key: "x"})


def test_llm_judge_section_from_yaml(tmp_path):
    path = tmp_path / "train.yaml"
    path.write_text("reward:\n  judge: llm\n  llm_judge:\n    base_url: http://127.0.0.1:8000/v1\n"
                    "    model: judge\n    corpus_path: corpus.jsonl\n    timeout_s: 5\n")
    cfg = RewardConfig.from_yaml(path)
    assert (cfg.llm_judge.model, cfg.llm_judge.timeout_s, cfg.llm_judge.concurrency) == ("judge", 5.0, 16)
    assert RewardConfig.from_dict(cfg.to_dict()) == cfg  # the resolved recipe reads back the same


def test_from_yaml_reads_the_reward_section(tmp_path):
    path = tmp_path / "train.yaml"
    path.write_text("model: tiny\nreward:\n  kind: static\n  static_reward: 0.3\n  gamma: 1\n")
    cfg = RewardConfig.from_yaml(path)
    assert (cfg.kind, cfg.static_reward, cfg.gamma) == ("static", 0.3, 1.0)
    assert isinstance(cfg.gamma, float)


def test_from_yaml_names_the_file_on_error(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("reward:\n  tau: -1\n")
    with pytest.raises(RewardConfigError, match="bad.yaml.*'tau'"):
        RewardConfig.from_yaml(path)


def test_the_docs_settings_tables_list_every_field_with_its_default():
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "rewards.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `([a-z_]+)` \| `([^`]*)` \|", text.split("## Settings", 1)[1], re.M))
    values = RewardConfig().to_dict()
    judge = values.pop("llm_judge")
    for name, value in {**values, **judge}.items():
        shown = "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
        assert rows.get(name) == shown, name
