"""Recipes parse and validate; overrides, bad fields and a missing capability column fail with the fix."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from awarl.cli import app
from awarl.train.config import ConfigError, TrainConfig

from .conftest import ROOT, TINY_RECIPE

RECIPES = [TINY_RECIPE, ROOT / "configs" / "qwen2.5-7b_8gpu.yaml"]


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_recipes_parse_and_match_trl_fields(path):
    cfg = TrainConfig.from_yaml(path)
    cfg.check_trainer_fields()  # every grpo / sft.args key is a GRPOConfig / SFTConfig field
    assert cfg.model.path and cfg.data.records
    assert cfg.grpo["num_generations"] >= 2


def test_7b_recipe_is_a_colocated_vllm_bf16_run():
    cfg = TrainConfig.from_yaml(RECIPES[1])
    g = cfg.grpo
    assert (g["bf16"], g["use_vllm"], g["vllm_mode"], g["vllm_tensor_parallel_size"]) == (True, True, "colocate", 1)
    assert 0 < g["vllm_gpu_memory_utilization"] < 0.5
    # >= 16 questions per generation batch on 8 GPUs (DESIGN §6: stable batch rates)
    rollouts = 8 * g["per_device_train_batch_size"] * g["gradient_accumulation_steps"]
    assert rollouts // g["num_generations"] >= 16


def test_7b_recipe_builds_trl_configs(tmp_path):
    """TRL's own checks (batch divisibility, …) pass; bf16 is switched off only because this
    machine has no GPU."""
    from trl import GRPOConfig, SFTConfig

    cfg = TrainConfig.from_yaml(RECIPES[1])
    grpo = GRPOConfig(output_dir=str(tmp_path), **{**cfg.grpo, "bf16": False})
    assert grpo.steps_per_generation == cfg.grpo["gradient_accumulation_steps"]
    assert SFTConfig(output_dir=str(tmp_path), **{**cfg.sft.args, "bf16": False}).max_length == 4096


def test_overrides_and_errors_name_the_field():
    cfg = TrainConfig.from_yaml(TINY_RECIPE, ["reward.gamma=0.3", "grpo.max_steps=7", "env.topk=4"])
    assert (cfg.reward.gamma, cfg.grpo["max_steps"], cfg.env.topk) == (0.3, 7, 4)
    with pytest.raises(ConfigError, match="did you mean 'topk'"):
        TrainConfig.from_yaml(TINY_RECIPE, ["env.top_k=4"])
    with pytest.raises(ConfigError, match="gamma"):
        TrainConfig.from_yaml(TINY_RECIPE, ["reward.gamma=1.5"])
    with pytest.raises(ConfigError, match="num_generations"):
        TrainConfig.from_yaml(TINY_RECIPE, ["grpo.num_generatons=4"]).check_trainer_fields()
    with pytest.raises(ConfigError, match="must end on a generation batch"):
        TrainConfig.from_yaml(TINY_RECIPE, ["grpo.save_steps=3", "grpo.steps_per_generation=4"])


def test_missing_capability_refuses_to_start_with_the_fix(train_files):
    from awarl.train.grpo import load_training_records

    cfg = TrainConfig.from_yaml(TINY_RECIPE, [f"data.records={train_files['records_nop']}", "data.capability=null"])
    with pytest.raises(ConfigError, match="awarl capability"):
        load_training_records(cfg)
    baseline = TrainConfig.from_yaml(TINY_RECIPE, [f"data.records={train_files['records_nop']}",
                                                   "data.capability=null", "reward.kind=static"])
    assert len(load_training_records(baseline)) == 40  # baselines need no p


def test_sweep_prints_one_accelerate_command_per_gamma(tmp_path):
    result = CliRunner().invoke(app, ["sweep", "--config", str(TINY_RECIPE), "--gamma", "0.3", "0.5", "1.0",
                                      "--out", str(tmp_path), "--print-commands"])
    assert result.exit_code == 0, result.output
    commands = [line for line in result.output.splitlines() if line.startswith("accelerate launch")]
    assert len(commands) == 3
    assert "reward.gamma=0.3" in commands[0] and f"output_dir={tmp_path}/gamma_1" in commands[2]
    assert "awarl eval report" in result.output
    bad = CliRunner().invoke(app, ["sweep", "--config", str(TINY_RECIPE), "--gamma", "0", "--print-commands"])
    assert bad.exit_code == 2 and "gamma" in bad.output


@pytest.mark.parametrize("name, kind, stage", [("ddp", "MULTI_GPU", None), ("zero2", "DEEPSPEED", 2),
                                               ("zero3", "DEEPSPEED", 3)])
def test_accelerate_configs(name, kind, stage):
    import yaml

    cfg = yaml.safe_load((ROOT / "configs" / "accelerate" / f"{name}.yaml").read_text())
    assert cfg["distributed_type"] == kind and cfg["mixed_precision"] == "bf16" and cfg["num_processes"] == 8
    assert (cfg.get("deepspeed_config") or {}).get("zero_stage") == stage


def test_multinode_launcher_checks_its_inputs():
    import subprocess

    script = ROOT / "scripts" / "launch_multinode.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    usage = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage" in usage.stderr
    env = {"PATH": "/usr/bin:/bin"}  # no SLURM, no MACHINE_RANK
    missing = subprocess.run(["bash", str(script), "--config", "c.yaml", "--index", "i"], capture_output=True,
                             text=True, env=env)
    assert missing.returncode == 2 and "MACHINE_RANK" in missing.stderr
