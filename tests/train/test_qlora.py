"""QLoRA (`model.quantization`): a bitsandbytes 4-bit base with LoRA adapters, SFT and GRPO through
awarl's own entry points on the CPU (bitsandbytes 0.50 ships a CPU backend), and a final model that is
plain full-precision weights with the adapters merged."""

from __future__ import annotations

import json

import pytest

from awarl.config_fields import ConfigError
from awarl.train.config import TrainConfig

from .conftest import TINY_RECIPE, tiny_overrides


def test_quantization_needs_lora_and_a_known_kind():
    with pytest.raises(ConfigError, match="needs model.lora: true"):
        TrainConfig.from_yaml(TINY_RECIPE, ["model.quantization=nf4"])
    with pytest.raises(ConfigError, match="quantization"):
        TrainConfig.from_yaml(TINY_RECIPE, ["model.lora=true", "model.quantization=int3"])
    cfg = TrainConfig.from_yaml(TINY_RECIPE, ["model.lora=true", "model.quantization=fp4"])
    assert cfg.model.quantization == "fp4"


@pytest.mark.slow
def test_qlora_sft_then_grpo_on_a_4bit_base(tiny_model_dir, world_train_files, tmp_path):
    pytest.importorskip("bitsandbytes")
    import torch
    from bitsandbytes.nn import Linear4bit
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from awarl.train import grpo, sft

    qlora = ["model.lora=true", "model.lora_r=4", "model.lora_alpha=8", "model.lora_dropout=0.0",
             "model.quantization=nf4"]
    base_overrides = tiny_overrides(tiny_model_dir, world_train_files, tmp_path / "grpo")
    sft_cfg = TrainConfig.from_yaml(TINY_RECIPE, [
        *base_overrides, *qlora, "sft.enabled=true", f"sft.output_dir={tmp_path / 'sft'}",
        f"data.records={world_train_files['records']}", "data.limit=8", "sft.source=gold",
        "sft.args.max_steps=2", "sft.args.per_device_train_batch_size=4", "sft.args.learning_rate=0.05",
    ])
    trainer = sft.build_trainer(sft_cfg, tmp_path / "sft")
    quantized = [m for m in trainer.model.modules() if isinstance(m, Linear4bit)]
    assert quantized and all(m.weight.quant_type == "nf4" for m in quantized)  # the frozen base is 4-bit
    trained = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert trained and all("lora_" in n for n in trained)  # only the adapters learn
    del trainer

    final = sft.main(sft_cfg)
    config = json.loads((final / "config.json").read_text())
    assert "quantization_config" not in config  # a plain checkpoint: p_i, eval and serving load it as is
    assert (final / "adapter" / "adapter_config.json").is_file()
    merged = load_file(final / "model.safetensors")
    assert merged and all(t.dtype == torch.float32 for t in merged.values())
    assert not any("lora" in k for k in merged)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    changed = [k for k, t in merged.items() if k in base and not torch.equal(t, base[k])]
    assert changed and all(k.endswith("proj.weight") for k in changed)  # the merged adapters, nothing else

    grpo_cfg = TrainConfig.from_yaml(TINY_RECIPE, [*base_overrides, *qlora, f"model.path={final}",
                                                   "grpo.max_steps=1", "grpo.per_device_train_batch_size=4"])
    out = grpo.main(grpo_cfg)
    assert "quantization_config" not in json.loads((out / "config.json").read_text())
    state = json.loads((tmp_path / "grpo" / "checkpoint-1" / "trainer_state.json").read_text())
    assert state["global_step"] == 1 and "awa/refusal_rate" in state["log_history"][0]
