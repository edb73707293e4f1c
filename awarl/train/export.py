"""Save a trained model so `vllm serve` and the runner load it directly.

The exported folder holds full weights (LoRA adapters merged), the tokenizer and its chat
template (TRL's tool loop and vLLM's ``hermes`` tool parser both depend on it), and the
generation config with ``<|im_end|>`` as a stop token.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class ExportError(RuntimeError):
    """A checkpoint that cannot be exported; the message says what is missing."""


def save_model(model: Any, tokenizer: Any, out_dir: str | Path, *, merge_lora: bool = True) -> Path:
    """Write model + tokenizer + chat template to ``out_dir``; merge LoRA adapters when asked."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if merge_lora and hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    if not getattr(tokenizer, "chat_template", None):
        raise ExportError("the tokenizer has no chat template; the runner and `vllm serve` need one to format "
                          "tool calls. Load the tokenizer from the base model folder.")
    if tokenizer.eos_token is not None and model.generation_config is not None:
        eos = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)
        stops = model.generation_config.eos_token_id
        stops = [stops] if isinstance(stops, int) else list(stops or [])
        if eos not in stops:
            model.generation_config.eos_token_id = [eos, *stops]
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def export_checkpoint(checkpoint: str | Path, out_dir: str | Path, *, base_model: str | None = None,
                      dtype: str = "auto") -> Path:
    """Export a training checkpoint (full weights or a LoRA adapter folder) to ``out_dir``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ckpt = Path(checkpoint)
    if not ckpt.is_dir():
        raise ExportError(f"{ckpt}: checkpoint folder not found")
    torch_dtype = {"auto": "auto", "float32": torch.float32, "bfloat16": torch.bfloat16,
                   "float16": torch.float16}[dtype]
    if (ckpt / "adapter_config.json").exists():
        from peft import PeftConfig, PeftModel

        base = base_model or PeftConfig.from_pretrained(str(ckpt)).base_model_name_or_path
        if not base:
            raise ExportError(f"{ckpt}: LoRA adapter without a base model; pass --base-model")
        model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=torch_dtype), str(ckpt))
        tok_source = ckpt if (ckpt / "tokenizer_config.json").exists() else Path(base)
    elif (ckpt / "config.json").exists():
        model = AutoModelForCausalLM.from_pretrained(str(ckpt), dtype=torch_dtype)
        tok_source = ckpt if (ckpt / "tokenizer_config.json").exists() else Path(base_model or "")
    else:
        raise ExportError(f"{ckpt}: neither config.json (full model) nor adapter_config.json (LoRA) found")
    if not str(tok_source) or not (Path(tok_source) / "tokenizer_config.json").exists() and not base_model:
        raise ExportError(f"{ckpt}: no tokenizer in the checkpoint; pass --base-model to take it from the base model")
    tokenizer = AutoTokenizer.from_pretrained(str(tok_source))
    return save_model(model, tokenizer, out_dir, merge_lora=True)
