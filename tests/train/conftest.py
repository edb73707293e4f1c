"""Fixtures for the training tests: the HotpotQA sample as records + corpus files, with a
capability column, and recipe overrides that keep runs to a few seconds per step on 2 cores."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY_RECIPE = ROOT / "configs" / "tiny_cpu.yaml"


@pytest.fixture(scope="session")
def train_files(hotpot_prepared, tmp_path_factory) -> dict[str, Path]:
    """records.jsonl (with ``p``), records_nop.jsonl (without) and corpus.jsonl."""
    from awarl.data.records import write_jsonl

    records, passages = hotpot_prepared
    out = tmp_path_factory.mktemp("train_data")
    rows = [r.to_dict() for r in records]
    write_jsonl(out / "records_nop.jsonl", rows)
    # Capability is an input here (normally `awarl capability` estimates it): a mix of easy and
    # hard questions so the expected refusal rate is neither 0 nor 1.
    write_jsonl(out / "records.jsonl", [{**row, "p": 0.8 if i % 2 else 0.1} for i, row in enumerate(rows)])
    write_jsonl(out / "corpus.jsonl", [p.to_dict() for p in passages])
    return {"records": out / "records.jsonl", "records_nop": out / "records_nop.jsonl", "corpus": out / "corpus.jsonl"}


WORLD_ROLLOUT = {"scope": "global", "topk": 3, "passage_words": 20, "max_searches": 2, "max_completion_tokens": 320}
"""The rollout settings the tiny test model was warm-started under (`awarl.train.tiny.warm_start_on_world`)."""


@pytest.fixture(scope="session")
def world_train_files(test_world, tmp_path_factory) -> dict[str, Path]:
    """The test world's RL split as records.jsonl (with ``p``), records_nop.jsonl (without) and its
    corpus: questions the warm-started tiny model can answer, miss or abstain on, so GRPO sees
    rewards that differ within a group (on the HotpotQA sample it mostly answers nothing)."""
    from awarl.data.adapters import load_dataset_file
    from awarl.data.records import write_jsonl
    from awarl.data.world import write_world

    out = tmp_path_factory.mktemp("world_train")
    files = write_world(test_world, out / "world")
    records, _ = load_dataset_file("musique", files["rl"])
    rows = [r.to_dict() for r in records]
    write_jsonl(out / "records_nop.jsonl", rows)
    write_jsonl(out / "records.jsonl", [{**row, "p": 0.8 if i % 2 else 0.1} for i, row in enumerate(rows)])
    return {"records": out / "records.jsonl", "records_nop": out / "records_nop.jsonl", "corpus": files["corpus"],
            "rollout": [f"rollout.{k}={v}" for k, v in WORLD_ROLLOUT.items()]}


def tiny_overrides(model_dir: Path, files: dict[str, Path], output_dir: Path, **grpo: object) -> list[str]:
    """The tiny recipe pointed at the test files, with small batches."""
    settings = {
        "max_steps": 2, "save_steps": 1, "per_device_train_batch_size": 8, "num_generations": 4,
        "steps_per_generation": 1, "logging_steps": 1, "report_to": "[none]",
        **grpo,
    }
    return [
        f"model.path={model_dir}",
        "sft.enabled=false",  # GRPO starts from model_dir itself
        "rollout.max_completion_tokens=256",
        *files.get("rollout", []),  # the settings the data was made for (the world's)
        f"data.records={files['records']}",
        "data.capability=null",
        f"data.corpus={files['corpus']}",
        f"output_dir={output_dir}",
        "logging.report_to=[none]",
        *(f"grpo.{k}={v}" for k, v in settings.items()),
    ]
