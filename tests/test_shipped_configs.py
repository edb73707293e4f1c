"""Every YAML file shipped under configs/ reads, builds and type-checks through the loader the
command that uses it runs: recipes through the training config builder (TRL field names included),
the demo recipe through its own loader (world and every arm), chat configs through
`load_chat_config`, policies through the policy loader and the lint, their tests and the
corrections through their loaders, accelerate configs as plain YAML that means the same to
accelerate (YAML 1.1) as to awarl (YAML 1.2)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from awarl.resources import CONFIGS, config_path

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted(p.relative_to(ROOT / "configs").as_posix() for p in (ROOT / "configs").rglob("*.yaml"))
DEMO_RECIPES = {"demo_world.yaml"}


def _kind(name: str) -> str:
    if name in DEMO_RECIPES:
        return "demo"
    if "/" not in name:
        return "recipe"
    folder = name.split("/", 1)[0]
    if folder == "policies":
        if name.endswith(".tests.yaml"):
            return "policy tests"
        return "corrections" if name.endswith("corrections.yaml") else "policy"
    return {"chat": "chat", "accelerate": "accelerate"}.get(folder, "unknown")


def test_every_shipped_yaml_has_a_reader_and_the_package_sees_the_same_folder():
    assert SHIPPED and not [name for name in SHIPPED if _kind(name) == "unknown"]
    assert CONFIGS.resolve() == (ROOT / "configs").resolve()  # one copy: the package reaches the top-level folder
    assert config_path("demo_world.yaml").is_file()


@pytest.mark.parametrize("name", [n for n in SHIPPED if _kind(n) == "recipe"])
def test_training_recipes_build(name):
    from awarl.train.config import TrainConfig

    cfg = TrainConfig.from_yaml(ROOT / "configs" / name)
    cfg.check_trainer_fields()
    assert cfg.model.path and cfg.data.records


@pytest.mark.parametrize("name", [n for n in SHIPPED if _kind(n) == "demo"])
@pytest.mark.parametrize("quick", [False, True])
def test_the_demo_recipe_builds_its_world_and_every_arm(name, quick):
    from awarl.data.world import WorldConfig
    from awarl.demo.recipe import DemoRecipe, merge
    from awarl.train.config import TrainConfig

    recipe = DemoRecipe.load(ROOT / "configs" / name, quick=quick)
    WorldConfig.from_dict(recipe.world, f"{name}: world")
    paths = {"model": {"path": "model"}, "data": {"records": "records.jsonl", "corpus": "corpus.jsonl"}}
    for arm in recipe.arms or {"": {}}:
        raw = merge(recipe.arm_train(arm) if arm else recipe.train, paths)
        TrainConfig.from_dict(raw, source=f"{name}, arm {arm!r}").check_trainer_fields()


@pytest.mark.parametrize("name", [n for n in SHIPPED if _kind(n) == "chat"])
def test_chat_configs_build(name, monkeypatch):
    """Inputs produced by other commands (a demo's world, a prepared corpus) are stood in for by
    shipped files, so every other key is read and type-checked as `awarl chat serve` reads it."""
    from awarl.chat.config import ChatSettings, load_chat_config

    raw = yaml.safe_load((ROOT / "configs" / name).read_text(encoding="utf-8"))
    stand_in = {"policy": str(config_path("policies", "pricing.yaml")), "corpus": str(ROOT / "data" / "samples" / "musique_ans_dev_sample.jsonl")}
    overrides = {key: stand_in[key] for key in stand_in if raw.get(key) and not (ROOT / raw[key]).exists()}
    monkeypatch.chdir(ROOT)  # a config's paths are read from the current directory
    settings = load_chat_config(ROOT / "configs" / name, **overrides)
    assert isinstance(settings, ChatSettings) and settings.policy


def test_the_vllm_agent_config_reads_decisions_on_as_the_word_on():
    """YAML 1.1 reads `decisions: on` as True, which a chat config refuses; awarl's one reader keeps it 'on'."""
    from awarl.config_fields import read_yaml_file

    assert read_yaml_file(config_path("chat", "vllm_agent.yaml"))["decisions"] == "on"


@pytest.mark.parametrize("name", [n for n in SHIPPED if _kind(n) == "policy"])
def test_policies_load_and_lint_without_errors(name):
    from awarl.verify.lint import lint
    from awarl.verify.policy import load_policy

    policy = load_policy(ROOT / "configs" / name)
    assert policy.rules and not [i for i in lint(policy, budget_s=30) if i.severity == "error"]


@pytest.mark.parametrize("name", [n for n in SHIPPED if _kind(n) == "policy tests"])
def test_policy_tests_load(name):
    from awarl.verify.policy_tests import load_policy_tests, policy_and_tests

    policy, tests = policy_and_tests(ROOT / "configs" / name, None)
    assert policy.exists() and load_policy_tests(tests)


@pytest.mark.parametrize("name", [n for n in SHIPPED if _kind(n) == "corrections"])
def test_corrections_load(name):
    from awarl.verify.citations import load_corrections

    assert load_corrections(ROOT / "configs" / name)


@pytest.mark.parametrize("name", [n for n in SHIPPED if _kind(n) == "accelerate"])
def test_accelerate_configs_mean_the_same_to_accelerate_and_awarl(name):
    from awarl.config_fields import load_yaml

    text = (ROOT / "configs" / name).read_text(encoding="utf-8")
    data = yaml.safe_load(text)  # what accelerate reads
    assert isinstance(data, dict) and data.get("distributed_type") and data.get("num_processes")
    assert load_yaml(text) == data
