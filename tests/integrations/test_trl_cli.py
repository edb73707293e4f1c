"""awarl's rewards through TRL's own CLI: resolution by import path, settings from the recipe, and
one real `trl grpo` run on the tiny offline model with the rewards named by path."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from awarl.config_fields import ConfigError
from awarl.protocol import ABSTAIN_PHRASE, build_messages
from awarl.rewards import RewardConfig, build_reward_funcs
from awarl.agent.settings import RolloutSettings
from awarl.integrations import trl as trl_cli

RECIPE = """\
rollout:
  metric: em
  refusal_phrases: [not enough information, no idea]
reward:
  kind: awa
  gamma: 0.3
  beta: 0.0
  w_cite: 0.5
  judge: gold
"""


def said(text: str) -> list[dict]:
    return [{"role": "assistant", "content": text}]


def resolve(path: str):
    """What TRL 1.16's grpo script does with a dotted --reward_funcs entry."""
    module_path, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(module_path), name)


@pytest.fixture
def recipe(tmp_path, monkeypatch):
    path = tmp_path / "recipe.yaml"
    path.write_text(RECIPE, encoding="utf-8")
    monkeypatch.setenv(trl_cli.RECIPE_ENV, str(path))
    trl_cli._build.cache_clear()
    yield path
    trl_cli._build.cache_clear()


COLUMNS = {
    "answers": [["Paris"], ["Paris"], ["Rome"], ["Rome"]],
    "answerable": [True, True, True, False],
    "p": [0.9, 0.9, 0.2, 0.05],
    "id": ["a", "a", "b", "b"],
    "supporting": [["d1", "d2"], ["d1", "d2"], ["d3"], []],
}
COMPLETIONS = [said("<answer>Paris</answer> [d1] [d9]"), said("<answer>Lyon</answer> [d1]"),
               said("<answer>no idea</answer>"), said(f"<answer>{ABSTAIN_PHRASE}</answer>")]


def test_trl_resolves_both_names_to_the_recipe_rewards(recipe):
    awa, cite = resolve("awarl.rewards.awa_reward"), resolve("awarl.rewards.citation_reward")
    assert (awa.__name__, cite.__name__) == ("awa_reward", "citation_reward")  # TRL's metric keys
    prompts = [build_messages(f"q{i}") for i in range(4)]
    logged: dict[str, float] = {}
    got = awa(prompts, COMPLETIONS, None, log_metric=logged.__setitem__, **COLUMNS)

    # The same numbers as awarl's own trainer builds from the same sections.
    reward_cfg = RewardConfig(kind="awa", gamma=0.3, beta=0.0, w_cite=0.5, judge="gold")
    rollout = RolloutSettings(metric="em", refusal_phrases=("not enough information", "no idea"))
    funcs, weights = build_reward_funcs(reward_cfg, rollout)
    assert got == funcs[0](prompts, COMPLETIONS, None, **COLUMNS)
    assert got[2] == pytest.approx(1 - 0.2 ** 0.3)  # "no idea" is a refusal phrase of this recipe
    assert logged["awa/refusal_rate"] == 0.5

    # The citation reward carries w_cite itself (TRL's reward_weights stay 1.0).
    cited = cite(prompts, COMPLETIONS, None, **COLUMNS)
    assert cited == [weights[1] * v if v is not None else None for v in funcs[1](prompts, COMPLETIONS, None, **COLUMNS)]
    assert cited[0] == pytest.approx(0.5 * (0.5 - 0.5 * 0.5)) and cited[1:] == [None, None, None]

    # One recipe, one process: both names share one penalty state.
    assert trl_cli.recipe_rewards().awa.penalty.state.step == 1


def test_recipe_errors_name_the_file_and_the_field(tmp_path, monkeypatch):
    bad = tmp_path / "bad.yaml"
    bad.write_text("reward:\n  gama: 0.3\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad.yaml: reward: unknown key 'gama'; did you mean 'gamma'"):
        trl_cli.recipe_rewards(bad)
    static = tmp_path / "static.yaml"
    static.write_text("reward:\n  kind: static\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="reward.kind is 'static'"):
        trl_cli.recipe_rewards(static)
    no_cite = tmp_path / "no_cite.yaml"
    no_cite.write_text("reward:\n  w_cite: 0\n", encoding="utf-8")
    monkeypatch.setenv(trl_cli.RECIPE_ENV, str(no_cite))
    with pytest.raises(ConfigError, match="drop awarl.rewards.citation_reward"):
        trl_cli.citation_reward([build_messages("q")], [said("<answer>x</answer>")], None, answers=[["x"]], p=[0.5])


def test_a_checkpoint_folder_names_its_recipe(tmp_path):
    (tmp_path / "awarl_recipe.yaml").write_text(RECIPE, encoding="utf-8")
    reward, rollout = trl_cli.load_recipe_settings(tmp_path)
    assert reward.gamma == 0.3 and rollout.phrases == ("not enough information", "no idea")


def test_unknown_names_are_still_attribute_errors():
    import awarl.rewards

    with pytest.raises(AttributeError, match="no attribute 'awa_rewrd'"):
        awarl.rewards.awa_rewrd  # noqa: B018


@pytest.mark.slow
def test_trl_grpo_cli_trains_with_awarl_rewards_by_path(tiny_model_dir, hotpot_prepared, tmp_path):
    """`trl grpo` itself (TRL's launcher, accelerate, its grpo script) for one step."""
    records, _ = hotpot_prepared
    data = tmp_path / "data"
    data.mkdir()
    with (data / "train.jsonl").open("w", encoding="utf-8") as f:
        for i, r in enumerate(records[:8]):
            f.write(json.dumps({"prompt": build_messages(r.question), "id": r.id, "answers": r.answers,
                                "answerable": r.answerable, "supporting": r.supporting,
                                "p": 0.8 if i % 2 else 0.1}) + "\n")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE, encoding="utf-8")
    config = tmp_path / "trl.yaml"  # TRL's own config file sets the recipe for the reward functions
    config.write_text(f"env:\n  AWARL_RECIPE: {recipe}\n", encoding="utf-8")
    trl = Path(sys.executable).with_name("trl")
    cmd = [str(trl), "grpo", "--config", str(config), "--model_name_or_path", str(tiny_model_dir),
           "--dataset_name", str(data), "--reward_funcs", "awarl.rewards.awa_reward", "awarl.rewards.citation_reward",
           "--output_dir", str(tmp_path / "out"), "--max_steps", "1", "--per_device_train_batch_size", "4",
           "--num_generations", "4", "--max_completion_length", "12", "--logging_steps", "1", "--report_to", "none",
           "--save_strategy", "no", "--use_cpu", "true", "--bf16", "false", "--dataloader_num_workers", "0"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1",
           "HF_DATASETS_CACHE": str(tmp_path / "datasets-cache")}
    env.pop(trl_cli.RECIPE_ENV, None)
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    lines = re.findall(r"\{'loss'.*?\}", out)  # TRL prints each logging step's metrics as a dict
    assert lines, out[-4000:]
    step = dict(re.findall(r"'([^']+)': '?([^,'}]+)'?", lines[0]))
    assert "rewards/awa_reward/mean" in step and "rewards/citation_reward/mean" in step
    assert 0.0 <= float(step["awa/refusal_rate"]) <= 1.0 and 0.0 <= float(step["awa/expected_refusal_rate"]) <= 1.0
    assert (tmp_path / "out" / "model.safetensors").exists()
