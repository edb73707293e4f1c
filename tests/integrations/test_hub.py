"""Hub-ready artifacts: a p_i table and an evaluation run as `datasets` datasets with a dataset card,
and the model card `awarl export` writes, each read back offline through `huggingface_hub`."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from awarl.cli import app
from awarl.protocol import ABSTAIN_PHRASE

datasets = pytest.importorskip("datasets")
from huggingface_hub import DatasetCard, ModelCard  # noqa: E402  (after the skip: part of the train extra)

ROLLOUT = ["--topk", "3", "--passage-words", "20", "--max-searches", "2"]


def _run(args):
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture
def eval_run(scripted_agent, world_eval_files, tmp_path):
    out = tmp_path / "eval" / "scripted"
    _run(["eval", "run", "--model", f"openai:{scripted_agent.base_url}#agent", "--data", str(world_eval_files["records"]),
          "--corpus", str(world_eval_files["corpus"]), "--out", str(out), "--no-progress", *ROLLOUT])
    return out


def test_eval_run_becomes_a_dataset_with_its_card(eval_run, world_eval_files, tmp_path):
    out = tmp_path / "hub" / "eval-scripted"
    _run(["export-dataset", str(eval_run), "--out", str(out)])

    metrics = json.loads((eval_run / "metrics.json").read_text())
    ds = datasets.load_dataset(str(out), cache_dir=str(tmp_path / "cache"))["test"]  # the hub layout, as load_dataset / the hub read it
    again = datasets.load_from_disk(str(out / "arrow"))
    for a, b in zip(ds.to_list(), again.to_list()):
        assert a == b, {k: (a[k], b[k]) for k in a if a[k] != b[k]}
    assert len(ds) == len(again) == metrics["overall"]["n"]
    outcomes = ds["outcome"]
    assert outcomes.count("correct") == metrics["overall"]["correct"] and outcomes.count("abstain") == metrics["overall"]["abstained"]
    assert set(outcomes) == {"correct", "wrong", "abstain"}
    row = ds[0]
    assert row["prompt"][-1] == {"role": "user", "content": row["question"]}
    assert row["searches"] == 1 and json.loads(row["messages"])[0]["tool_calls"]
    assert row["p"] == 0.1  # the records' capability column travels

    card = DatasetCard.load(out / "README.md")  # offline round trip (no validate(): it calls the hub)
    meta = card.data.to_dict()
    assert meta["configs"][0]["data_files"][0] == {"split": "test", "path": "data/test-*.parquet"}
    prov = meta["awarl"]
    assert prov["kind"] == "eval_run" and prov["checkpoint"] == metrics["model"]
    assert prov["temperature"] == 0.0 and prov["rollout"]["topk"] == 3 and prov["rollout"]["max_searches"] == 2
    assert prov["metrics"]["macro"]["ra_f1"] == pytest.approx(metrics["macro"]["ra_f1"])
    assert "| RA-F1 |" in card.text and ABSTAIN_PHRASE in card.text


def test_capability_table_becomes_a_training_dataset(scripted_agent, world_eval_files, tmp_path):
    cap = tmp_path / "capability.jsonl"
    _run(["capability", "estimate", "--model", f"openai:{scripted_agent.base_url}#agent",
          "--data", str(world_eval_files["records"]), "--corpus", str(world_eval_files["corpus"]),
          "--k", "2", "--temperature", "1.0", "--out", str(cap), "--no-progress", *ROLLOUT])
    out = tmp_path / "hub" / "p-table"
    _run(["export-dataset", str(cap), "--out", str(out), "--name", "world p_i"])

    ds = datasets.load_dataset(str(out), cache_dir=str(tmp_path / "cache"))["train"]
    rows = [json.loads(line) for line in cap.read_text().splitlines()]
    assert ds["id"] == [r["id"] for r in rows] and ds["p"] == [r["p"] for r in rows]
    assert set(ds["p"]) == {0.0, 1.0}  # the scripted agent is deterministic: all or none of K right
    assert {"prompt", "answers", "answerable", "supporting", "rollouts_correct"} <= set(ds.column_names)
    assert ds["rollouts_correct"] == [r["capability"]["correct"] for r in rows]
    assert all("capability" not in json.loads(meta) for meta in ds["meta"])  # the card holds the provenance
    meta = DatasetCard.load(out / "README.md").data.to_dict()
    assert meta["pretty_name"] == "world p_i"
    prov = meta["awarl"]
    assert (prov["kind"], prov["k"], prov["temperature"]) == ("capability", 2, 1.0)
    assert prov["checkpoint"] == f"openai:{scripted_agent.base_url}#agent" and prov["rollout"]["passage_words"] == 20

    # A table that mixes two estimation runs is refused, naming the line and the field.
    mixed = tmp_path / "mixed.jsonl"
    rows[1]["capability"]["k"] = 4
    mixed.write_text("".join(json.dumps(r) + "\n" for r in rows))
    bad = CliRunner().invoke(app, ["export-dataset", str(mixed), "--out", str(tmp_path / "x")])
    assert bad.exit_code != 0 and "line 2" in bad.output and "capability.k" in bad.output
    rows[1]["capability"]["k"] = rows[0]["capability"]["k"]
    for p in ("high", 1.7):  # not a capability: refused as `awarl train grpo` refuses it
        rows[1]["p"] = p
        mixed.write_text("".join(json.dumps(r) + "\n" for r in rows))
        bad = CliRunner().invoke(app, ["export-dataset", str(mixed), "--out", str(tmp_path / "x")])
        assert bad.exit_code == 1 and f"line 2, field 'p': capability must be a number in [0, 1], got {p!r}" in bad.output


def test_model_card_round_trips_with_model_index(eval_run, tiny_model_dir, tmp_path):
    from awarl.agent.settings import RolloutSettings
    from awarl.train.config import TrainConfig

    ckpt = tmp_path / "run" / "checkpoint-4"
    ckpt.parent.mkdir()
    shutil.copytree(tiny_model_dir, ckpt)
    recipe = TrainConfig.from_dict({"model": {"path": "Qwen/Qwen2.5-0.5B-Instruct"}, "reward": {"gamma": 0.3},
                                    "rollout": {"topk": 3, "passage_words": 20, "max_searches": 2, "refusal_phrases": [ABSTAIN_PHRASE, "no idea"]}})
    recipe.save(ckpt.parent)  # awarl_recipe.yaml + rollout.json beside the checkpoint, as training writes them
    metrics_path = eval_run / "metrics.json"
    metrics = json.loads(metrics_path.read_text())
    metrics["model"] = str(ckpt)  # the run evaluated this checkpoint
    metrics_path.write_text(json.dumps(metrics))

    out = tmp_path / "agent"
    _run(["export", str(ckpt), "--out", str(out), "--eval-run", str(eval_run)])
    card = ModelCard.load(out / "README.md")
    data = card.data
    assert {"trl", "grpo", "awarl"} <= set(data.tags) and data.base_model == "Qwen/Qwen2.5-0.5B-Instruct"
    assert data.library_name == "transformers" and data.model_name == "agent"
    results = {(r.dataset_name, r.metric_type): r.metric_value for r in data.eval_results}
    [(dataset, m)] = metrics["per_dataset"].items()
    for key in ("ra_f1", "precision", "accuracy", "refusal_rate"):
        assert results[(dataset, key)] == pytest.approx(m[key], abs=1e-4)
    assert all(r.task_type == "question-answering" for r in data.eval_results)
    meta = data.to_dict()
    assert meta["model-index"][0]["name"] == "agent"
    assert meta["awarl"]["refusal_phrase"] == ABSTAIN_PHRASE and meta["awarl"]["refusal_phrases"][1] == "no idea"
    assert meta["awarl"]["reward"]["gamma"] == 0.3 and meta["awarl"]["rollout"]["topk"] == 3
    assert RolloutSettings.from_dict(json.loads((out / "rollout.json").read_text())).topk == 3
    assert f"<answer>{ABSTAIN_PHRASE}</answer>" in card.text and "| gamma | 0.3000 |" in card.text

    # A run of another model is not this checkpoint's score.
    metrics["model"] = str(tiny_model_dir)
    metrics_path.write_text(json.dumps(metrics))
    other = CliRunner().invoke(app, ["export", str(ckpt), "--out", str(tmp_path / "agent2"), "--eval-run", str(eval_run)])
    assert other.exit_code == 2 and "not the checkpoint" in other.output
