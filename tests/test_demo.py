"""`awarl demo`.

The end-to-end test is `awarl demo --quick` itself (the session fixture `quick_demo_dir`, shared with the
chat tests): its files, its quick floors and a resume. `tiny_recipe` shrinks the recipe to seconds per stage
for the tests of resuming and refusing."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

from awarl.demo import DEFAULT_RECIPE, DemoRecipe, refusal_by_p, run_demo, summary_fields

ROOT = Path(__file__).resolve().parents[1]


def tiny_recipe(path: Path) -> Path:
    """The demo recipe shrunk to seconds of work per stage."""
    raw = yaml.safe_load(DEFAULT_RECIPE.read_text())
    raw["world"]["persons"] = 30
    raw["capability"]["k"] = 2
    raw["sft"]["args"].update(max_steps=12, logging_steps=4, save_steps=4)
    raw["grpo"].update(max_steps=4, save_steps=2, per_device_train_batch_size=8, steps_per_generation=2)
    raw["logging"]["report_to"] = []
    path.write_text(yaml.safe_dump(raw))
    return path


def _all_finite(value, where="metrics"):
    if isinstance(value, float):
        assert math.isfinite(value), where
    elif isinstance(value, dict):
        for k, v in value.items():
            _all_finite(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _all_finite(v, f"{where}[{i}]")


@pytest.mark.slow
def test_the_quick_demo_writes_everything_meets_its_floors_and_resumes(quick_demo_dir, tmp_path, capfd):
    """`awarl demo --quick` as a user runs it (the session's `quick_demo_dir`): every file, finite numbers in
    range, the recipe's quick floors met (a real bound on the base: it reads its results), and a rerun in a
    moved copy reuses every stage and gives the same numbers."""
    out = quick_demo_dir
    for rel in ("demo.json", "metrics.json", "report/report.md", "report/before_after.png", "report/refusal_by_p.png",
                "report/refusal_vs_step.png", "report/reward_terms.png", "world/policy.yaml", "world/policy.tests.yaml",
                "data/corpus.jsonl", "sft/final/rollout.json", "grpo/awa/final/rollout.json",
                "grpo/none/final/rollout.json", "grpo/none/metrics_log.jsonl", "demo.log"):
        assert (out / rel).exists(), rel
    saved = json.loads((out / "metrics.json").read_text())
    _all_finite(saved)
    quick = DemoRecipe.load(DEFAULT_RECIPE, quick=True)
    assert saved["mode"] == "quick" and saved["seed"] == 0 and list(saved["arms"]) == ["awa", "none"]
    assert saved["workers"] == (2 if (os.cpu_count() or 1) >= 2 else 1)  # arms, shards, evaluations in workers
    assert [arm["reward"]["kind"] for arm in saved["arms"].values()] == ["awa", "none"]
    for run in (saved["before_rl"], *(arm["after_rl"] for arm in saved["arms"].values())):
        for key in ("precision", "accuracy", "ra_f1", "refusal_rate", "abstain_recall", "over_refusal"):
            assert 0.0 <= run[key] <= 1.0
    assert saved["arms"]["awa"]["expected_refusal"] is not None and saved["arms"]["none"]["expected_refusal"] is None
    by_target = saved["arms"]["awa"]["refusal_by_target"]
    assert sum(g["n"] for g in by_target.values()) == saved["world"]["eval"]["questions"]
    assert "### Refusal where the AWA target abstains and where it answers" in (quick_demo_dir / "report/report.md").read_text()
    kinds = {k["kind"]: k for k in saved["by_kind"]}  # every held-out question, once, under its world v2 kind
    assert sum(k["n"] for k in kinds.values()) == saved["world"]["eval"]["questions"]
    assert {"1/1@0", "missing", "near_miss_variant", "near_miss_relation"} <= set(kinds)
    assert all(set(k["runs"]) == {"before RL", "awa", "none"} for k in kinds.values())
    runs = {"before RL": saved["before_rl"], **{name: arm["after_rl"] for name, arm in saved["arms"].items()}}
    for name, run in runs.items():  # the kinds add up to each run's held-out accuracy and refusal
        for key, rate in (("accuracy", "accuracy"), ("refusal", "refusal_rate")):
            total = sum(k["runs"][name][key] * k["runs"][name]["n"] for k in kinds.values())
            assert total / saved["world"]["eval"]["questions"] == pytest.approx(run[rate]), (name, key)
    assert "### By kind of question" in (quick_demo_dir / "report/report.md").read_text()
    steps = quick.train["grpo"]["max_steps"]
    assert all(arm["grpo_steps"] == steps and arm["refusal_by_p"] for arm in saved["arms"].values())
    assert saved["capability"]["eval"]["k"] == quick.k and saved["before_rl_refusal_by_p"]
    # the floors: every one the quick recipe names was checked and met, and none of them is a token bound
    named = {f"{floor} (awa)" if floor == "refusal_gap" else floor for floor in quick.floors}
    assert set(saved["checks"]) == named
    assert quick.floors["sft_accuracy_answerable"] >= 0.3
    assert all(check["passed"] for check in saved["checks"].values()), saved["checks"]
    assert saved["before_rl"]["accuracy_answerable"] >= quick.floors["sft_accuracy_answerable"]
    assert not any("quality floor missed" in w for w in saved["warnings"])
    spread = {c["name"]: c for c in saved["capability"]["rl"]["spread"]}  # world v2 records u: the base is checked
    assert set(spread) == {"mean p_i", "share p <= 0.2", "share p in (0.2, 0.5)", "share p >= 0.6", "Spearman(p_i, u)"}
    assert spread["mean p_i"]["value"] > 0.2 and spread["Spearman(p_i, u)"]["value"] > 0.3  # p_i follows the ceiling
    manifest = json.loads((out / "demo.json").read_text())
    assert manifest["agent"] == "grpo/awa/final" and manifest["sft_agent"] == "sft/final"
    assert manifest["agents"] == {"awa": "grpo/awa/final", "none": "grpo/none/final"}
    for key in ("world", "corpus", "policy", "policy_tests", "agent", "sft_agent"):
        assert (out / manifest[key]).exists() and not Path(manifest[key]).is_absolute()
    assert manifest["rollout"]["max_searches"] == yaml.safe_load(DEFAULT_RECIPE.read_text())["rollout"]["max_searches"]
    report = (out / "report" / "report.md").read_text()
    assert "before RL" in report and "penalty P_t" in report and "What the reward buys" in report
    assert "after RL: awa (reward `awa`)" in report and "after RL: none (reward `none`)" in report
    assert "**awa − none**: precision" in report and "| before RL | " in report  # the refusal-by-p_i table
    assert "A base with spread" in report and "| Spearman(p_i, u) | >= 0.5 |" in report
    assert "| cite coverage | right, all cited | cites not retrieved |" in report  # hops cited; cites read or not
    assert all("support_coverage" in run and "all_support_share" in run and "unretrieved_share" in run
               for run in (saved["before_rl"], *(arm["after_rl"] for arm in saved["arms"].values())))
    log = (out / "demo.log").read_text()
    assert "loss" in log  # TRL's per-step dicts went to the log
    # a copy elsewhere resumes: every stage is reused (no training output on the terminal), the numbers are the same
    moved = tmp_path / "moved"
    shutil.copytree(out, moved)
    capfd.readouterr()
    again = run_demo(moved, quick=True, progress=False)
    assert "'loss'" not in "".join(capfd.readouterr())
    assert again["before_rl"] == saved["before_rl"] and again["arms"] == saved["arms"]
    assert json.loads((moved / "metrics.json").read_text())["checks"] == saved["checks"]


class _Killed(Exception):
    """What the simulated kill raises."""


def _watch_sft(monkeypatch, callback) -> None:
    """Hand ``callback`` to every SFT trainer the demo builds (the real trainer, watched)."""
    from awarl.train import sft

    build = sft.build_trainer

    def watched(*args, **kwargs):
        trainer = build(*args, **kwargs)
        trainer.add_callback(callback)
        return trainer

    monkeypatch.setattr(sft, "build_trainer", watched)


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


@pytest.mark.slow
def test_killed_sft_resumes_from_its_checkpoint_after_the_folder_moved(tmp_path, monkeypatch):
    import torch
    from transformers import TrainerCallback

    class KillAfterSave(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            if state.global_step >= 8:
                raise _Killed(state.global_step)

    class FirstStep(TrainerCallback):
        first = None

        def on_step_end(self, args, state, control, **kwargs):
            self.first = self.first or state.global_step

    recipe = tiny_recipe(tmp_path / "recipe.yaml")  # SFT: 12 steps, a checkpoint every 4
    _watch_sft(monkeypatch, KillAfterSave())
    with pytest.raises(_Killed):
        run_demo(tmp_path / "first", recipe=recipe, progress=False, until="sft")
    assert (tmp_path / "first" / "sft" / "checkpoint-8" / "trainer_state.json").exists()
    assert not (tmp_path / "first" / "sft" / "final").exists()
    (tmp_path / "first").rename(tmp_path / "moved")
    seen = FirstStep()
    monkeypatch.undo()
    _watch_sft(monkeypatch, seen)
    run_demo(tmp_path / "moved", recipe=recipe, progress=False, until="p_i")
    assert seen.first == 9  # step 9 of 12 came first: the run went on from checkpoint-8, not from step 0
    straight = tmp_path / "straight"
    shutil.copytree(tmp_path / "moved" / "model", straight / "model")  # the same random model, not rebuilt
    run_demo(straight, recipe=recipe, progress=False, until="sft")
    resumed, uninterrupted = _weights(tmp_path / "moved" / "sft" / "final"), _weights(straight / "sft" / "final")
    assert resumed.keys() == uninterrupted.keys()
    assert all(torch.equal(resumed[k], uninterrupted[k]) for k in resumed)
    # moved once more after p_i: every stage is reused where it now lies, nothing is refused or redone
    p_rows = (tmp_path / "moved" / "capability" / "eval.jsonl").read_text()
    (tmp_path / "moved").rename(tmp_path / "again")
    run_demo(tmp_path / "again", recipe=recipe, progress=False, until="p_i")
    assert (tmp_path / "again" / "capability" / "eval.jsonl").read_text() == p_rows
    for rel in ("recipe.json", "demo.json", "capability/rl.jsonl", "sft/awarl_recipe.yaml", "sft/final/awarl_recipe.yaml"):
        text = (tmp_path / "again" / rel).read_text()
        assert not any(str(tmp_path / name) in text for name in ("first", "moved", "again")), rel


def test_demo_refuses_a_folder_of_another_world(tmp_path):
    from awarl.demo import DemoError

    recipe = tiny_recipe(tmp_path / "recipe.yaml")
    run_demo(tmp_path / "d", recipe=recipe, progress=False, until="world")
    with pytest.raises(DemoError, match="other settings.*world.seed: 0 -> 1"):
        run_demo(tmp_path / "d", recipe=recipe, seed=1, progress=False, until="world")
    assert json.loads((tmp_path / "d" / "demo.json").read_text())["agent"] is None
    (tmp_path / "d" / "recipe.json").unlink()  # a folder from before the settings were recorded: the world still decides
    with pytest.raises(DemoError, match="another world"):
        run_demo(tmp_path / "d", recipe=recipe, seed=1, progress=False, until="world")


def test_demo_refuses_to_resume_with_other_training_settings(tmp_path):
    from awarl.demo import DemoError

    recipe = tiny_recipe(tmp_path / "recipe.yaml")
    run_demo(tmp_path / "d", recipe=recipe, progress=False, until="world")
    with pytest.raises(DemoError, match=r"sft.args.max_steps: \d+ -> 999.*another --out"):
        run_demo(tmp_path / "d", recipe=recipe, progress=False, until="world", overrides=["sft.args.max_steps=999"])
    run_demo(tmp_path / "d", recipe=recipe, progress=False, until="world", overrides=["floors.full.refusal_gap=0.2"])



@pytest.mark.parametrize("typo, says", [
    ("world.persns=300", r"world: unknown knob\(s\) \['persns'\]"),
    ("shape.hiden_size=64", "shape.hiden_size is not a field of the model's shape"),
    ("arms.none.reward.kindd=static", "reward: unknown key 'kindd'"),  # not the first arm: checked too
])
def test_a_misspelt_field_fails_at_once_and_leaves_the_folder_usable(tmp_path, typo, says):
    from awarl.demo import DemoError
    from awarl.errors import AwarlError

    recipe = tiny_recipe(tmp_path / "recipe.yaml")
    with pytest.raises(AwarlError, match=says):
        run_demo(tmp_path / "d", recipe=recipe, progress=False, until="world", overrides=[typo])
    assert not (tmp_path / "d" / "recipe.json").exists()  # nothing recorded, so the corrected rerun starts
    run_demo(tmp_path / "d", recipe=recipe, progress=False, until="world")
    with pytest.raises(DemoError, match=f"^{tmp_path / 'd'} was started with other settings"):  # names the folder
        run_demo(tmp_path / "d", recipe=recipe, progress=False, until="world", overrides=["sft.args.max_steps=999"])

def test_naming_trls_default_num_iterations_still_resumes_a_folder_started_without_it(tmp_path):
    from awarl.demo import DemoError

    recipe = tiny_recipe(tmp_path / "recipe.yaml")
    run_demo(tmp_path / "d", recipe=recipe, progress=False, until="world")
    run_demo(tmp_path / "d", recipe=recipe, progress=False, until="world", overrides=["grpo.num_iterations=1"])
    with pytest.raises(DemoError, match=r"grpo.num_iterations: '<unset>' -> 2"):
        run_demo(tmp_path / "d", recipe=recipe, progress=False, until="world",
                 overrides=["grpo.num_iterations=2", "grpo.save_steps=4"])


@pytest.mark.parametrize("grpo, batches", [
    ({"max_steps": 160, "steps_per_generation": 4}, 40),
    ({"max_steps": 320, "steps_per_generation": 4, "num_iterations": 2}, 40),  # each batch optimized twice
    ({"max_steps": 24, "gradient_accumulation_steps": 2, "steps_per_generation": 4}, 12),
])
def test_generation_batches_count_a_batch_once_however_often_it_is_optimized(grpo, batches):
    from types import SimpleNamespace

    from awarl.demo.run import generation_batches

    assert generation_batches(SimpleNamespace(grpo=grpo)) == batches


def test_quick_overrides_and_floors():
    full, quick = DemoRecipe.load(DEFAULT_RECIPE), DemoRecipe.load(DEFAULT_RECIPE, quick=True, seed=7)
    assert quick.train["sft"]["args"]["max_steps"] < full.train["sft"]["args"]["max_steps"]
    assert quick.world["persons"] < full.world["persons"] and quick.world["seed"] == 7 and quick.train["seed"] == 7
    assert full.floors == {"sft_accuracy_answerable": 0.3, "refusal_gap": 0.1, "ceiling_gap": 0.1}
    assert quick.floors["sft_accuracy_answerable"] == 0.3  # a real bound, the full demo's


@pytest.mark.parametrize("override, problem", [
    ("floors.full.refusal_gapp=0.1", "floors.full.refusal_gapp is not a quality check (known: sft_accuracy_answerable"),
    ("floors.full.ceiling_gap=near", "floors.full.ceiling_gap must be a number, got 'near'"),
    ("floors.full=[0.1]", "floors.full must map check names to numbers"),
    ("floors.quick.sft_accuracy=0.3", "floors.quick.sft_accuracy is not a quality check"),  # checked in a full run too
    ("floors.ful.refusal_gap=0.1", "floors.ful is not a mode (floors has full and quick)"),
])
def test_a_floor_that_checks_nothing_is_refused_by_name(override, problem):
    from awarl.demo import DemoError

    with pytest.raises(DemoError, match=re.escape(problem)):
        DemoRecipe.load(DEFAULT_RECIPE, overrides=[override])


def test_quality_checks_grade_each_arm_by_its_own_floor():
    """The refusal gap for an arm with a training target, the ceiling gap for a `none` arm against mean(u)."""
    from types import SimpleNamespace

    from awarl.demo.report import quality_checks

    warned: list[str] = []
    demo = SimpleNamespace(recipe=SimpleNamespace(floors={"sft_accuracy_answerable": 0.3, "refusal_gap": 0.1,
                                                          "ceiling_gap": 0.1}), warn=warned.append)
    arms = {"awa": {"reward": {"kind": "awa"}, "expected_refusal": 0.65,
                    "after_rl": {"refusal_rate": 0.51, "accuracy_answerable": 0.41}},
            "none": {"reward": {"kind": "none"}, "expected_refusal": None,
                     "after_rl": {"refusal_rate": 0.28, "accuracy_answerable": 0.37}}}
    mean_u = 0.725
    checks = quality_checks(demo, {"accuracy_answerable": 0.46}, arms, mean_u)
    assert set(checks) == {"sft_accuracy_answerable", "refusal_gap (awa)", "ceiling_gap (none)"}
    assert checks["refusal_gap (awa)"]["value"] == pytest.approx(0.14) and not checks["refusal_gap (awa)"]["passed"]
    assert checks["ceiling_gap (none)"]["value"] == pytest.approx(0.355) and not checks["ceiling_gap (none)"]["passed"]
    assert [w.split(" = ")[0] for w in warned] == ["quality floor missed: refusal_gap (awa)",
                                                   "quality floor missed: ceiling_gap (none)"]
    assert '"By kind of question"' in warned[1]
    arms["none"]["after_rl"]["accuracy_answerable"] = 0.70  # within 0.1 of mean(u): passed; world v1: not checked
    assert quality_checks(demo, {"accuracy_answerable": 0.46}, arms, mean_u)["ceiling_gap (none)"]["passed"]
    assert "ceiling_gap (none)" not in quality_checks(demo, {"accuracy_answerable": 0.46}, arms, None)


def test_set_overrides_apply_after_quick_and_reach_the_world(tmp_path):
    from typer.testing import CliRunner

    from awarl.cli import app
    from awarl.config_fields import ConfigError

    loaded = DemoRecipe.load(DEFAULT_RECIPE, quick=True, overrides=["sft.args.max_steps=450", "world.persons=40"])
    assert loaded.train["sft"]["args"]["max_steps"] == 450 and loaded.world["persons"] == 40
    with pytest.raises(ConfigError, match="section.field=value"):
        DemoRecipe.load(DEFAULT_RECIPE, overrides=["sft.args.max_steps"])
    recipe = tiny_recipe(tmp_path / "recipe.yaml")
    result = CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "d"), "--recipe", str(recipe), "--set", "world.persons=30",
                                      "--until", "world", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "d" / "world" / "world.json").read_text())["config"]["persons"] == 30


@pytest.mark.parametrize("warm_start, message", [({"abstain_share": 1.5}, "abstain_share must be a number"),
                                                  ({"abstain_share": True}, "abstain_share must be a number"),
                                                  ({"abstain": 0.3}, "unknown key"),
                                                  ({"renamed_copies": -1}, "renamed_copies must be a whole number"),
                                                  ({"renamed_copies": 2.5}, "renamed_copies must be a whole number"),
                                                  ({"originals": False}, "originals: false needs"),
                                                  ({"renamed_copies": 2, "originals": "no"}, "originals must be true"),
                                                  ({"renamed_copies": 2, "rename_ids": "yes"}, "rename_ids must be true"),
                                                  ({"rename_ids": True}, "rename_ids: true needs"),
                                                  ({"clarified_share": 2}, "clarified_share must be a number"),
                                                  ({"clarified_share": "half"}, "clarified_share must be a number"),
                                                  ({"misread_share": -0.1}, "misread_share must be a number"),
                                                  ({"misread_share": False}, "misread_share must be a number")])
def test_bad_warm_start_names_the_key(tmp_path, warm_start, message):
    from awarl.demo import DemoError

    raw = yaml.safe_load(DEFAULT_RECIPE.read_text())
    raw["warm_start"] = warm_start
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(DemoError, match=f"warm_start.*{message}|{message}"):
        DemoRecipe.load(path)
    assert DemoRecipe.load(DEFAULT_RECIPE).abstain_share == 0.3


def test_the_rollout_device_is_read_and_checked(tmp_path):
    """capability.device: where p_i and the evaluation roll out (cpu unless set; a GPU run sets cuda)."""
    from awarl.demo import DemoError

    assert DemoRecipe.load(DEFAULT_RECIPE).device == "cpu"
    assert DemoRecipe.load(DEFAULT_RECIPE, overrides=["capability.device=cuda:1"]).device == "cuda:1"
    with pytest.raises(DemoError, match="capability.device must be cpu, auto, cuda or cuda:N, got 'gpu'"):
        DemoRecipe.load(DEFAULT_RECIPE, overrides=["capability.device=gpu"])


def test_arms_name_their_reward_and_change_only_reward_and_grpo(tmp_path):
    from awarl.demo import DemoError

    loaded = DemoRecipe.load(DEFAULT_RECIPE)
    assert {name: arm["reward"]["kind"] for name, arm in loaded.arms.items()} == {"awa": "awa", "none": "none"}
    assert loaded.arm_train("none")["reward"]["gamma"] == loaded.train["reward"]["gamma"]  # shared, kind replaced
    assert loaded.arm_train("none")["reward"]["kind"] == "none" and loaded.train["reward"]["kind"] == "awa"
    assert loaded.temperature == loaded.train["grpo"]["temperature"]  # p_i samples as GRPO does
    assert DemoRecipe.load(DEFAULT_RECIPE, overrides=["grpo.temperature=0.7"]).temperature == 0.7
    swapped = DemoRecipe.load(DEFAULT_RECIPE, overrides=["arms.none.reward.kind=static"])
    assert swapped.arms["none"]["reward"]["kind"] == "static"
    raw = yaml.safe_load(DEFAULT_RECIPE.read_text())
    for arms, message in (({"awa": {"grpo": {"max_steps": 3}}}, "must name its reward kind"),
                          ({"awa": {"reward": {"kind": "awa"}, "sft": {"args": {}}}}, r"reward and grpo only, not \['sft'\]"),
                          ({"a/b": {"reward": {"kind": "awa"}}}, "not a folder name"), ([], "must map each arm"),
                          ({"awa": {"reward": {"kind": "awa"}, "grpo": {"temperature": 0.7}}},
                           "may not change grpo.temperature: p_i is sampled once")):
        raw["arms"] = arms
        (tmp_path / "r.yaml").write_text(yaml.safe_dump(raw))
        with pytest.raises(DemoError, match=message):
            DemoRecipe.load(tmp_path / "r.yaml")
    del raw["arms"]
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(raw))
    assert DemoRecipe.load(tmp_path / "r.yaml").arms == {"awa": {"reward": {"kind": "awa"}}}


def test_a_world_v2_demo_names_its_search_noise_inside_the_folder():
    import io

    from awarl.demo import Demo, DemoPaths, Display

    def rollout(version):
        loaded = DemoRecipe.load(DEFAULT_RECIPE, overrides=[f"world.version={version}"])
        demo = Demo(DemoPaths(Path(".")), loaded, Display(io.StringIO(), enabled=False), quick=False, seed=0)
        assert demo.train_config().rollout.world_noise == demo.rollout.world_noise  # one agent for every stage
        return demo.rollout

    assert rollout(2).world_noise == "world/noise.json" and rollout(1).world_noise is None


def test_refusal_by_p_bins_by_value():
    rows = [{"p": 0.0, "abstained": True}, {"p": 0.0, "abstained": False}, {"p": 0.25, "abstained": False},
            {"p": 1.0, "abstained": False}, {"p": None, "abstained": True}]
    assert refusal_by_p(rows) == [{"p": 0.0, "n": 2, "refusal": 0.5}, {"p": 0.25, "n": 1, "refusal": 0.0},
                                  {"p": 1.0, "n": 1, "refusal": 0.0}]


def test_refusal_by_target_splits_answerable_questions_by_what_the_target_asks():
    from awarl.demo.report import refusal_by_target
    from awarl.rewards.config import RewardConfig

    rows = [{"p": 0.0, "answerable": False, "outcome": "abstain"}, {"p": 0.0, "answerable": False, "outcome": "wrong"},
            {"p": 0.1, "answerable": True, "outcome": "abstain"}, {"p": 0.2, "answerable": True, "outcome": "wrong"},
            {"p": 0.9, "answerable": True, "outcome": "correct"}, {"p": None, "answerable": True, "outcome": "abstain"}]
    awa = RewardConfig(kind="awa", gamma=0.5, p_clip=0.1)  # refusing is the better bet below p ≈ 0.38
    assert refusal_by_target(rows, awa) == {
        "unanswerable": {"n": 2, "refusal": 0.5}, "answerable, refusing the better bet": {"n": 2, "refusal": 0.5},
        "answerable, answering the better bet": {"n": 1, "refusal": 0.0}}
    assert refusal_by_target(rows, RewardConfig(kind="none")) is None


def test_the_report_says_when_citations_are_recalled_not_read():
    """Where most cited passages were never returned by the agent's own searches, the report says so per run;
    where the agent cites what it read, it says nothing."""
    from awarl.demo.report import _citation_lines

    arm = {"reward": {"kind": "awa"}, "after_rl": {"unretrieved_share": 0.994}}
    metrics = {"before_rl": {"unretrieved_share": 0.2}, "arms": {"awa": arm}}
    text = "\n".join(_citation_lines(metrics))
    assert "Citations are recalled, not read" in text and "after RL: awa 99%" in text and "before RL" not in text
    metrics["arms"]["awa"]["after_rl"]["unretrieved_share"] = None  # no citations at all
    assert _citation_lines(metrics) == []


def test_summary_line_fields():
    assert summary_fields("[sft] step 40/600 | loss 0.4210 | 0.21 s/step") == {"step": 40.0, "loss": 0.421}


def test_quiet_terminal_sends_library_output_to_the_log(tmp_path, capfd):
    from awarl.train.callbacks import quiet_terminal

    with quiet_terminal(tmp_path / "x.log") as terminal:
        print("per-step dict {'loss': 1.0}", flush=True)
        os.write(1, b"a C-level line\n")
        os.write(2, b"a C-level warning\n")
        terminal.write("for the user\n")
    seen = capfd.readouterr()
    assert "for the user" in seen.err and "loss" not in seen.out + seen.err
    log = (tmp_path / "x.log").read_text()
    assert "per-step dict" in log and "C-level line" in log and "C-level warning" in log


def test_quick_and_full_demos_default_to_their_own_folders(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from awarl.cli import app

    monkeypatch.chdir(tmp_path)
    recipe = tiny_recipe(tmp_path / "recipe.yaml")
    for args, folder in ((["--quick"], "runs/demo-quick"), ([], "runs/demo")):
        result = CliRunner().invoke(app, ["demo", *args, "--recipe", str(recipe), "--until", "world", "--no-progress"])
        assert result.exit_code == 0, result.output
        assert (tmp_path / folder / "world" / "world.json").exists()


def test_a_noisy_teacher_is_read_recorded_and_reported():
    """warm_start.misread_share: off in the shipped recipe (so its folders resume as they were), read from an
    override, recorded in the folder's settings only when on, and said in the report."""
    from awarl.demo.recipe import settings as recipe_settings
    from awarl.demo.report import _misread_line

    shipped = DemoRecipe.load(DEFAULT_RECIPE)
    assert shipped.misread_share == 0.0 and not any("misread" in k for k in recipe_settings(shipped))
    noisy = DemoRecipe.load(DEFAULT_RECIPE, overrides=["warm_start.misread_share=0.65"])
    assert noisy.misread_share == 0.65 and recipe_settings(noisy)["warm_start.misread_share"] == 0.65
    assert _misread_line({"warm_start_misread_share": 0.0}) == _misread_line({}) == ""
    assert "65%" in _misread_line({"warm_start_misread_share": 0.65})


def test_the_report_says_when_the_warm_start_saw_the_users_reply():
    from awarl.demo.report import _clarified_line

    assert _clarified_line({"warm_start_clarified_share": 0.0}) == _clarified_line({}) == ""
    line = _clarified_line({"warm_start_clarified_share": 0.5})
    assert "50%" in line and "`warm_start.clarified_share`" in line
    shipped = DemoRecipe.load(DEFAULT_RECIPE)
    # the share and the SFT length go together: at 0.2 the base reads again only past 2,400 steps at every layout
    assert shipped.clarified_share == 0.2 and shipped.train["sft"]["args"]["max_steps"] >= 2400
    assert DemoRecipe.load(DEFAULT_RECIPE, quick=True).clarified_share == 0.2
    assert DemoRecipe.load(DEFAULT_RECIPE, overrides=["warm_start.clarified_share=0.5"]).clarified_share == 0.5
