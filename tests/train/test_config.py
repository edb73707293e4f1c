"""Recipes parse and validate; overrides, bad fields and a missing capability column fail with the fix."""

from __future__ import annotations

import re

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
    # >= 16 questions per generation batch on 8 GPUs (batch refusal rates need >= 16 prompts to be stable)
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
    cfg = TrainConfig.from_yaml(TINY_RECIPE, ["reward.gamma=0.3", "grpo.max_steps=7", "rollout.topk=4"])
    assert (cfg.reward.gamma, cfg.grpo["max_steps"], cfg.rollout.topk) == (0.3, 7, 4)
    with pytest.raises(ConfigError, match="did you mean 'topk'"):
        TrainConfig.from_yaml(TINY_RECIPE, ["rollout.top_k=4"])
    with pytest.raises(ConfigError, match="gamma"):
        TrainConfig.from_yaml(TINY_RECIPE, ["reward.gamma=1.5"])
    with pytest.raises(ConfigError, match="num_generations"):
        TrainConfig.from_yaml(TINY_RECIPE, ["grpo.num_generatons=4"]).check_trainer_fields()
    with pytest.raises(ConfigError, match="must end on a generation batch"):
        TrainConfig.from_yaml(TINY_RECIPE, ["grpo.save_steps=3", "grpo.steps_per_generation=4"])


@pytest.mark.parametrize("override, message", [
    ("seed=abc", "seed: expected a whole number, got 'abc'"),
    ("grpo.learning_rate=abc", "grpo.learning_rate must be a number"),
    ("rollout.scope=weird", "rollout.scope: must be one of 'global', 'closed'"),
    ("grpo.num_generations=abc", "grpo.num_generations must be a whole number"),
    ("rollout.topk=2.5", "rollout.topk: expected a whole number, got 2.5"),
    ("rollout.passage_words=0", "passage_words must be >= 1"),
    ("model.path=''", "model.path is empty"),
    ("grpo.max_completion_length=128", "set from rollout.max_completion_tokens"),
    ("grpo.max_tool_calling_iterations=3", "set from rollout.max_searches"),
    ("data.scope=closed", "data: unknown field(s) 'scope'"),
    ("logging.summary=maybe", "logging.summary: expected true or false"),
])
def test_every_field_is_type_checked_by_the_one_validation_path(override, message):
    """`awarl train check` and every training command load recipes through TrainConfig.from_yaml."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        TrainConfig.from_yaml(TINY_RECIPE, [override]).check_trainer_fields()
    result = CliRunner().invoke(app, ["train", "check", "--config", str(TINY_RECIPE), "--set", override])
    assert result.exit_code == 2 and "Traceback" not in result.output and message.split(":")[0] in result.output


def test_the_rollout_commands_refuse_a_trl_field_the_rollout_sets(tmp_path):
    """`capability estimate --config` / `eval run --config` read only the rollout section; a TRL field that
    the rollout settings set, left in grpo:, would train another agent than they measure, so it is refused."""
    from awarl.agent.options import recipe_rollout

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("grpo:\n  max_completion_length: 128\n")
    with pytest.raises(ConfigError, match="grpo.max_completion_length is set from rollout.max_completion_tokens"):
        recipe_rollout(recipe)


def test_pass_through_fields_are_type_checked_against_trl():
    with pytest.raises(ConfigError, match=r"grpo.log_completions: expected true or false"):
        TrainConfig.from_yaml(TINY_RECIPE, ["grpo.log_completions=3"]).check_trainer_fields()


def test_grpo_chains_from_the_sft_stage():
    """A recipe with an SFT stage starts GRPO (and p_i) from the SFT output, not from the base model."""
    big = TrainConfig.from_yaml(RECIPES[1])
    assert big.sft.enabled and big.grpo_start() == "runs/qwen2.5-7b-sft/final"
    assert TrainConfig.from_yaml(RECIPES[1], ["sft.enabled=false"]).grpo_start() == "Qwen/Qwen2.5-7B-Instruct"
    tiny = TrainConfig.from_yaml(TINY_RECIPE)
    assert tiny.grpo_start() == "runs/tiny/sft/final" and tiny.model.path == "runs/tiny/model"


def test_recipe_and_rollout_settings_are_saved_and_reloaded(tmp_path):
    from awarl.agent.settings import load_rollout

    cfg = TrainConfig.from_yaml(TINY_RECIPE, ["rollout.topk=5"])
    cfg.save(tmp_path)
    assert load_rollout(tmp_path).resolved() == cfg.rollout.resolved()
    again = TrainConfig.from_yaml(tmp_path / "awarl_recipe.yaml")
    assert again.to_dict() == cfg.to_dict()
    assert cfg.hyperparameters()["reward/gamma"] == 0.5 and cfg.hyperparameters()["rollout/topk"] == 5


def test_capability_measured_under_other_settings_is_refused(train_files, tmp_path):
    """p_i of another agent (other passage words, other checkpoint) is not this recipe's p_i."""
    import json

    from awarl.train.grpo import load_training_records

    cfg = TrainConfig.from_yaml(TINY_RECIPE, [f"data.records={train_files['records_nop']}"])
    rows = [json.loads(line) for line in train_files["records_nop"].read_text().splitlines()]

    def write(rollout, model, temperature=1.0):
        path = tmp_path / "cap.jsonl"
        path.write_text("".join(json.dumps({"id": r["id"], "p": 0.5, "capability": {
            "k": 4, "model": model, "temperature": temperature, "rollout": rollout.resolved()}}) + "\n" for r in rows))
        return TrainConfig.from_yaml(TINY_RECIPE, [f"data.records={train_files['records_nop']}",
                                                   f"data.capability={path}"])

    ok = write(cfg.rollout, cfg.grpo_start())
    assert len(load_training_records(ok)) == 40
    other = write(cfg.rollout.replace(passage_words=100), cfg.grpo_start())
    with pytest.raises(ConfigError, match=r"other rollout settings than this recipe's \(passage_words: 30 vs 100; recipe vs measured"):
        load_training_records(other)
    base = write(cfg.rollout, "runs/tiny/model")
    with pytest.raises(ConfigError, match="measured on 'runs/tiny/model', but GRPO starts from 'runs/tiny/sft/final'"):
        load_training_records(base)
    colder = write(cfg.rollout, cfg.grpo_start(), temperature=0.7)
    assert cfg.sampling_temperature() == 1.0
    with pytest.raises(ConfigError, match=r"sampled at temperature 0.7, but GRPO samples at grpo.temperature 1\. "
                                          r"Re-estimate with --temperature 1"):
        load_training_records(colder)


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


@pytest.mark.parametrize("change, says", [
    ("sft.keep_outcomes=[correct,abstian]", r"'abstian' is not an outcome; .* \(did you mean 'abstain'\?\)"),
    ("sft.args.assistant_only_loss=false", "assistant_only_loss must stay true"),
])
def test_train_check_refuses_sft_settings_that_train_sft_would(change, says):
    """`awarl train check` catches them, not `train sft` after the data stage (or never, for a misspelt outcome,
    which silently dropped every trajectory of that outcome)."""
    res = CliRunner().invoke(app, ["train", "check", "--config", str(TINY_RECIPE), "--set", change])
    assert res.exit_code == 2 and re.search(says, res.output), res.output
