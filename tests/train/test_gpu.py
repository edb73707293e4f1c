"""The tiny recipe in bf16 on CUDA (skipped on CPU-only machines)."""

from __future__ import annotations

import json
import math

import pytest

from awarl.train import grpo
from awarl.train.callbacks import PENALTY_STATE_FILE
from awarl.train.config import TrainConfig

from .conftest import TINY_RECIPE, tiny_overrides


@pytest.fixture(scope="module")
def train_files(world_train_files):
    """GRPO runs on the test world, the one the shared tiny model (`tiny_sft_model_dir`) was warm-started
    on: data it can get right, wrong or abstain on."""
    return world_train_files


@pytest.mark.gpu
@pytest.mark.slow
def test_tiny_recipe_bf16_on_cuda(tiny_sft_model_dir, train_files, tmp_path):
    overrides = tiny_overrides(tiny_sft_model_dir, train_files, tmp_path, use_cpu="false", bf16="true")
    cfg = TrainConfig.from_yaml(TINY_RECIPE, [*overrides, "model.dtype=bfloat16"])
    final = grpo.main(cfg)
    state = json.loads((tmp_path / "checkpoint-2" / "trainer_state.json").read_text())
    losses = [h["loss"] for h in state["log_history"] if "loss" in h]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    assert json.loads((tmp_path / "checkpoint-2" / PENALTY_STATE_FILE).read_text())["penalty"]["step"] == 2
    assert (final / "model.safetensors").exists()
