"""Real GRPO runs on CPU with the tiny model and SearchEnv: training moves the weights and logs the
AWA terms; checkpoints hold the penalty state; a killed run resumes exactly where it stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from awarl.data.records import DataError
from awarl.errors import ConfigError
from awarl.train import grpo
from awarl.train.callbacks import PENALTY_STATE_FILE
from awarl.train.config import TrainConfig

from .conftest import ROOT, TINY_RECIPE, tiny_overrides

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def train_files(world_train_files):
    """GRPO runs on the test world, the one the shared tiny model (`tiny_sft_model_dir`) was warm-started
    on: data it can get right, wrong or abstain on."""
    return world_train_files

AWA_KEYS = ("awa/refusal_rate", "awa/expected_refusal_rate", "awa/E", "awa/E_ema", "awa/penalty",
            "awa/accuracy", "awa/precision", "awa/ra_f1", "env/searches_per_rollout", "awa/all_abstain_groups",
            "awa/zero_advantage_groups", "awa/three_outcome_groups", "awa/collapse_warning")


def _state(folder: Path) -> dict:
    return json.loads((folder / "trainer_state.json").read_text())


def _penalty(folder: Path) -> dict:
    return json.loads((folder / PENALTY_STATE_FILE).read_text())


def _prompts(run: Path, step: int) -> list[str]:
    import pandas as pd

    frame = pd.read_parquet(run / "completions" / f"completions_{step:05d}.parquet")
    return [str(p) for p in frame["prompt"]]


def _full_overrides(model_dir, files, out):
    """Two steps, a checkpoint and an evaluation on 4 held-out questions after each (evaluation samples
    too, so a run compared with this one must evaluate the same way)."""
    overrides = tiny_overrides(model_dir, files, out, log_completions="true", eval_strategy="steps", eval_steps=1,
                               per_device_eval_batch_size=16)
    return [*overrides, f"data.eval_records={files['records']}", "data.eval_limit=4"]


@pytest.fixture(scope="module")
def full_run(tiny_sft_model_dir, train_files, tmp_path_factory):
    """Two steps without interruption, a checkpoint after each, and an evaluation on a held-out split
    after each (the eval records carry p like the training ones)."""
    out = tmp_path_factory.mktemp("grpo_full")
    cfg = TrainConfig.from_yaml(TINY_RECIPE, _full_overrides(tiny_sft_model_dir, train_files, out))
    final = grpo.main(cfg)
    return out, final


def test_grpo_trains_logs_awa_terms_and_checkpoints_penalty(full_run, tiny_sft_model_dir):
    from safetensors.torch import load_file

    out, final = full_run
    start = load_file(tiny_sft_model_dir / "model.safetensors")
    end = load_file(final / "model.safetensors")
    changed = [k for k in start if not (start[k] == end[k]).all()]
    assert changed, "GRPO did not change any parameter"

    logs = [h for h in _state(out / "checkpoint-2")["log_history"] if "loss" in h]
    assert len(logs) == 2
    for key in AWA_KEYS:
        assert all(key in h for h in logs), key
    for step in (1, 2):
        saved = _penalty(out / f"checkpoint-{step}")
        logged = logs[step - 1]
        assert saved["global_step"] == step and saved["penalty"]["step"] == step  # one update per generation batch
        assert saved["penalty"]["penalty"] == pytest.approx(logged["awa/penalty"])
        assert saved["penalty"]["error_ema"] == pytest.approx(logged["awa/E_ema"])
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(final).chat_template  # final model loads with its template


def test_evaluation_runs_on_the_held_out_split_without_moving_the_penalty(full_run):
    """TRL scores evaluation batches with the training rewards; the penalty must not move there: after
    two training steps and two evaluations the penalty has exactly two updates."""
    out, _ = full_run
    history = _state(out / "checkpoint-2")["log_history"]
    evals = [h for h in history if "eval_loss" in h or any(k.startswith("eval_") for k in h)]
    assert len(evals) == 2, history
    assert all("eval_awa/refusal_rate" in h for h in evals)
    assert _penalty(out / "checkpoint-2")["penalty"]["step"] == 2


def test_resolved_recipe_is_saved_beside_the_checkpoints(full_run):
    from awarl.agent.settings import load_rollout

    out, final = full_run
    for folder in (out, final):
        saved = TrainConfig.from_yaml(folder / "awarl_recipe.yaml")
        assert saved.rollout.resolved() == load_rollout(folder).resolved()
        assert (saved.reward.gamma, saved.rollout.max_completion_tokens) == (0.5, 320)


KILLER = textwrap.dedent("""
    import os, signal, sys
    from awarl.train import grpo
    from awarl.train.callbacks import Callback
    from awarl.train.config import TrainConfig

    class KillAfterSave(Callback):
        def on_save(self, args, state, control, **kw):
            if state.global_step == 1:  # the checkpoint is complete: die without any cleanup
                os.kill(os.getpid(), signal.SIGKILL)

    grpo.main(TrainConfig.from_yaml(sys.argv[1], sys.argv[2:]), extra_callbacks=[KillAfterSave()])
""")


def test_killed_run_resumes_with_same_step_penalty_and_data(full_run, tiny_sft_model_dir, train_files, tmp_path):
    full, _ = full_run
    out = tmp_path / "grpo_killed"
    overrides = _full_overrides(tiny_sft_model_dir, train_files, out)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", KILLER, str(TINY_RECIPE), *overrides], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert (out / "checkpoint-1" / PENALTY_STATE_FILE).exists() and not (out / "checkpoint-2").exists()
    assert _penalty(out / "checkpoint-1") == _penalty(full / "checkpoint-1")

    grpo.main(TrainConfig.from_yaml(TINY_RECIPE, overrides), resume="latest")

    assert _state(out / "checkpoint-2")["global_step"] == 2
    assert _penalty(out / "checkpoint-2") == _penalty(full / "checkpoint-2")
    assert _prompts(out, 2) == _prompts(full, 2), "data order differs after resuming"
    resumed = [h for h in _state(out / "checkpoint-2")["log_history"] if h.get("step") == 2 and "loss" in h]
    reference = [h for h in _state(full / "checkpoint-2")["log_history"] if h.get("step") == 2 and "loss" in h]
    assert len(resumed) == len(reference) == 1
    for a, b in zip(resumed, reference):
        assert {k: a[k] for k in AWA_KEYS} == pytest.approx({k: b[k] for k in AWA_KEYS})


def test_two_process_torchrun_cpu(tiny_sft_model_dir, train_files, tmp_path):
    out = tmp_path / "grpo_ddp"
    overrides = tiny_overrides(tiny_sft_model_dir, train_files, out, save_steps=2, per_device_train_batch_size=4)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29731",
           "-m", "awarl.cli", "train", "grpo", "--config", str(TINY_RECIPE)]
    for item in overrides:
        cmd += ["--set", item]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    state = _state(out / "checkpoint-2")
    logs = [h for h in state["log_history"] if "loss" in h]
    assert len(logs) == 2 and all("awa/penalty" in h for h in logs)
    assert _penalty(out / "checkpoint-2")["penalty"]["step"] == 2
    assert (out / "final" / "model.safetensors").exists()


def test_local_sweep_trains_per_gamma_and_reports(tiny_sft_model_dir, train_files, tmp_path):
    from awarl.train import sweep

    overrides = tiny_overrides(tiny_sft_model_dir, train_files, tmp_path / "sweep", max_steps=1,
                               save_strategy="no", per_device_train_batch_size=4)
    runs = sweep.plan(TINY_RECIPE, [0.3, 1.0], overrides)
    results = sweep.run_sweep(TINY_RECIPE, runs, eval_data=train_files["records"], eval_limit=3)
    finals, report = results[:-1], results[-1]
    assert [f.parent.name for f in finals] == ["gamma_0.3", "gamma_1"]
    assert all((f / "model.safetensors").exists() for f in finals)
    text = (report / "report.md").read_text()
    assert "gamma=0.3" in text and "gamma=1" in text
    # rerun: the finished runs and their evaluations are reused, not retrained under stale evaluations
    weights = [(f / "model.safetensors").stat().st_mtime_ns for f in finals]
    again = sweep.run_sweep(TINY_RECIPE, runs, eval_data=train_files["records"], eval_limit=3)
    assert again[:-1] == finals and [(f / "model.safetensors").stat().st_mtime_ns for f in finals] == weights
    changed = sweep.plan(TINY_RECIPE, [1.0], [*overrides, "grpo.learning_rate=0.01"])
    with pytest.raises(ConfigError, match=r"gamma_1 holds a finished run trained with another recipe \(sections differing: grpo\)"):
        sweep.run_sweep(TINY_RECIPE, changed, eval_data=train_files["records"], eval_limit=3)
    with pytest.raises(ConfigError, match="already holds a run"):  # `awarl train grpo` without --resume: not wiped
        grpo.main(TrainConfig.from_yaml(TINY_RECIPE, list(changed[0].overrides)))
    with pytest.raises(DataError, match="nope.jsonl"):  # a wrong evaluation file fails before any training
        sweep.run_sweep(TINY_RECIPE, sweep.plan(TINY_RECIPE, [0.5], overrides), eval_data=tmp_path / "nope.jsonl")
    assert not (tmp_path / "sweep" / "gamma_0.5").exists()


def test_grpo_searches_a_retrieval_server(tiny_sft_model_dir, train_files, tmp_path):
    """The cluster setup: rollouts search a node-local `awarl search serve` over HTTP."""
    from awarl.data.records import load_corpus
    from awarl.search.bm25 import BM25Index
    from awarl.search.server import background_server

    index = BM25Index.build(load_corpus(train_files["corpus"]))
    out = tmp_path / "grpo_http"
    with background_server(index) as url:
        overrides = tiny_overrides(tiny_sft_model_dir, train_files, out, max_steps=1, save_strategy="no")
        cfg = TrainConfig.from_yaml(TINY_RECIPE, [*overrides, "data.corpus=null", f"data.retriever_url={url}"])
        trainer, _ = grpo.build_trainer(cfg, str(out))
        trainer.train()
    searches = [h["env/searches_per_rollout"] for h in trainer.state.log_history if "env/searches_per_rollout" in h]
    assert searches and searches[0] > 0  # the model searched, and the server answered
    assert trainer.state.log_history[0]["tools/failure_frequency"] == 0


def test_capability_training_and_evaluation_describe_one_agent(full_run, tiny_sft_model_dir, train_files, tmp_path):
    """p_i, GRPO and evaluation run the same agent: each stage reads the recipe's rollout section
    (`--config`) and records it; read back, the three records are identical."""
    from typer.testing import CliRunner

    from awarl.agent.settings import load_rollout
    from awarl.cli import app

    out, final = full_run
    recipe = out / "awarl_recipe.yaml"
    few = tmp_path / "records.jsonl"
    few.write_text("".join(train_files["records"].read_text().splitlines(keepends=True)[:2]))
    cli = CliRunner()
    cap = tmp_path / "cap.jsonl"
    res = cli.invoke(app, ["capability", "estimate", "--config", str(recipe), "--model", str(tiny_sft_model_dir),
                           "--data", str(few), "--corpus", str(train_files["corpus"]), "--k", "2",
                           "--out", str(cap), "--device", "cpu", "--no-progress"])
    assert res.exit_code == 0, res.output
    res = cli.invoke(app, ["eval", "run", "--config", str(recipe), "--model", str(final), "--data", str(few),
                           "--corpus", str(train_files["corpus"]), "--out", str(tmp_path / "eval"), "--device", "cpu",
                           "--no-progress"])
    assert res.exit_code == 0, res.output
    trained = load_rollout(final).resolved()
    measured = [json.loads(line)["capability"]["rollout"] for line in cap.read_text().splitlines()]
    evaluated = json.loads((tmp_path / "eval" / "run.json").read_text())["rollout"]
    assert measured == [trained, trained] and evaluated == trained
    # Evaluating the checkpoint without --config uses the settings saved with it, not the defaults.
    res = cli.invoke(app, ["eval", "run", "--model", str(final), "--data", str(few), "--corpus",
                           str(train_files["corpus"]), "--out", str(tmp_path / "eval2"), "--device", "cpu",
                           "--seed", "5", "--no-progress"])
    assert res.exit_code == 0, res.output
    run = json.loads((tmp_path / "eval2" / "run.json").read_text())
    assert run["rollout"] == trained and run["seed"] == 5  # a demo's --seed S evaluation is repeatable from the CLI


# -- forced answers in all-abstain groups ---------------------------------------------------------------------
def test_grpo_with_forced_answers_generates_replaces_and_counts_them(tiny_sft_model_dir, train_files, tmp_path,
                                                                      monkeypatch):
    """A real run in which every group gets its forced answer. The warm-started tiny model seldom abstains
    on a whole group, so the group choice (`forced_rollouts`, tested on its own in tests/rewards) is replaced
    by "the first rollout of every group". The forced rollouts pass the rollout checks, never abstain, are
    what GRPO trains on, and count as abstentions in the logged refusal rate."""
    import pandas as pd

    from awarl.protocol import parse_final
    from awarl.train import forced

    monkeypatch.setattr(forced, "forced_rollouts",
                        lambda flags: sorted({g: min((r, i) for r, i, h, _ in flags if h == g)
                                              for _, _, g, _ in flags}.values()))
    out = tmp_path / "forced"
    overrides = [*tiny_overrides(tiny_sft_model_dir, train_files, out, log_completions="true"),
                 "reward.forced_answer=true"]
    grpo.main(TrainConfig.from_yaml(TINY_RECIPE, overrides))
    logs = [h for h in _state(out / "checkpoint-2")["log_history"] if "loss" in h]
    assert len(logs) == 2
    for step, row in enumerate(logs, start=1):
        frame = pd.read_parquet(out / "completions" / f"completions_{step:05d}.parquet")
        abstained = [parse_final(str(c)).abstained for c in frame["completion"]]
        first = ~frame["prompt"].astype(str).duplicated()  # the forced rollout of each group: its first
        assert first.sum() == 2 and not any(a for a, f in zip(abstained, first) if f)
        assert row["awa/forced_answers"] == 1.0
        policy = sum(a for a, f in zip(abstained, first) if not f) + first.sum()  # forced count as abstentions
        assert row["awa/refusal_rate"] == pytest.approx(policy / len(frame))
        assert row["completions/mean_length"] > 0 and "env/truncated" in row


# -- adaptive p_i: the forced-answer probe --------------------------------------------------------------------
def _adaptive_overrides(model_dir, files, out, **grpo_settings):
    return [*tiny_overrides(model_dir, files, out, **grpo_settings), "reward.adaptive_p=true",
            "reward.adaptive_p_every=1", "reward.adaptive_p_questions=4", "reward.adaptive_p_samples=2"]


def test_probe_cannot_sample_a_refusal(tiny_sft_model_dir):
    """Every banned sequence's last token is never drawn after its prefix, greedy or seeded sampling."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from awarl.llm.base import SamplingParams
    from awarl.llm.hf import HFGenerator
    from awarl.protocol import DEFAULT_REFUSAL_PHRASES, build_messages
    from awarl.train.probe import _NoRefusal, refusal_token_sequences

    tokenizer = AutoTokenizer.from_pretrained(tiny_sft_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_sft_model_dir)
    banned = refusal_token_sequences(tokenizer, DEFAULT_REFUSAL_PHRASES)
    assert banned and all(seq for seq in banned)
    prompt = tokenizer.apply_chat_template(build_messages("Who founded Ruvia?"), add_generation_prompt=True)
    prompt = list(prompt if isinstance(prompt, list) else prompt["input_ids"])
    prefixes = [prompt + tokenizer.encode("<answer>", add_special_tokens=False) + seq[:-1] for seq in banned]
    backend = HFGenerator("probe", model_obj=_NoRefusal(model, banned), tokenizer_obj=tokenizer)
    for params in (SamplingParams(max_new_tokens=1),
                   SamplingParams(temperature=1.0, max_new_tokens=1, seeds=tuple(range(len(prefixes))))):
        gens = backend.generate(prefixes, params)
        assert all(g.token_ids[:1] != seq[-1:] for g, seq in zip(gens, banned))


def test_forced_answer_probe_counts_without_touching_the_penalty(tiny_sft_model_dir, train_files, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from awarl.train.probe import PROBE_LOG_FILE, ForcedAnswerProbe, read_probe_log

    cfg = TrainConfig.from_yaml(TINY_RECIPE, _adaptive_overrides(tiny_sft_model_dir, train_files, tmp_path))
    records = grpo.load_training_records(cfg)
    _, _, reward = grpo.build_rewards(cfg)
    model = AutoModelForCausalLM.from_pretrained(tiny_sft_model_dir)
    model.train()
    probe = ForcedAnswerProbe(reward, records, grpo.env_factory(cfg), cfg.rollout, output_dir=tmp_path)
    for step in (1, 2):
        probe.run(model, AutoTokenizer.from_pretrained(tiny_sft_model_dir), step=step)
    rows = read_probe_log(tmp_path / PROBE_LOG_FILE)
    assert [r["round"] for r in rows] == [1, 2] and all(r["rollouts"] == 8 for r in rows)
    assert all(r["abstained"] == 0 for r in rows)  # forced: the refusal phrase cannot be written
    assert all(0 <= r["correct"] <= r["rollouts"] and 0.0 <= r["window_p"] <= 1.0 for r in rows)
    assert reward.adaptive.rollouts == 16 and len(reward.adaptive.counts) == min(8, len(records))
    assert reward.penalty.state.step == 0  # probe rollouts never reach P_t
    assert model.training  # the training mode is restored


def test_grpo_with_adaptive_p_records_updates_and_resumes(tiny_sft_model_dir, train_files, tmp_path):
    import shutil

    from awarl.train.probe import PROBE_LOG_FILE, read_probe_log

    whole = tmp_path / "whole"
    grpo.main(TrainConfig.from_yaml(TINY_RECIPE, _adaptive_overrides(tiny_sft_model_dir, train_files, whole)))
    rows = read_probe_log(whole / PROBE_LOG_FILE)
    assert [r["step"] for r in rows] == [1, 2] and all(r["rollouts"] == 8 for r in rows)
    saved = [_penalty(whole / f"checkpoint-{s}")["penalty"] for s in (1, 2)]
    assert [s["adaptive"]["rounds"] for s in saved] == [1, 2] and saved[1]["adaptive"]["rollouts"] == 16
    logs = [h for h in _state(whole / "checkpoint-2")["log_history"] if "loss" in h]
    assert logs[1]["awa/probe_rollouts"] == 8  # logged with the second batch: the first probe's compute

    resumed = tmp_path / "resumed"
    shutil.copytree(whole / "checkpoint-1", resumed / "checkpoint-1")
    grpo.main(TrainConfig.from_yaml(TINY_RECIPE, _adaptive_overrides(tiny_sft_model_dir, train_files, resumed)),
              resume="latest")
    def without_seconds(folder):
        saved = _penalty(folder)
        assert saved["penalty"]["adaptive"].pop("seconds") > 0  # probe time is counted, and differs run to run
        return saved

    assert without_seconds(resumed / "checkpoint-2") == without_seconds(whole / "checkpoint-2")


def test_a_checkpoint_killed_while_saving_is_no_run_to_refuse(tmp_path):
    """Transformers writes trainer_state.json last: a folder without it is what a kill during the first save
    leaves, which `--resume latest` cannot use either, so a fresh start there is not refused."""
    (tmp_path / "checkpoint-20").mkdir()
    assert grpo.started_run(tmp_path) == []
    (tmp_path / "checkpoint-20" / "trainer_state.json").write_text("{}")
    (tmp_path / "final").mkdir()
    (tmp_path / "final" / "config.json").write_text("{}")
    assert grpo.started_run(tmp_path) == ["checkpoint-20", "final"]
