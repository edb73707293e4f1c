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
        f"data.records={files['records']}",
        "data.capability=null",
        f"data.corpus={files['corpus']}",
        f"output_dir={output_dir}",
        "logging.report_to=[none]",
        *(f"grpo.{k}={v}" for k, v in settings.items()),
    ]
