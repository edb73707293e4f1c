"""Save a trained model so `vllm serve` and the runner load it directly.

The exported folder holds full weights (LoRA adapters merged), the tokenizer and its chat
template (TRL's tool loop and vLLM's ``hermes`` tool parser both depend on it), and the
generation config with ``<|im_end|>`` as a stop token. It also carries the training recipe and
rollout settings when the checkpoint has them (so the exported agent is served under the settings
it was trained with) and a model card of its own: TRL's draft card names the base model only when
it was a hub id, and reads "fine-tuned version of [None]" for a local one.
"""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path
from typing import Any

from awarl.agent.settings import RECIPE_FILE, ROLLOUT_FILE

log = logging.getLogger(__name__)


class ExportError(RuntimeError):
    """A checkpoint that cannot be exported; the message says what is missing."""


SETTINGS_FILES = (RECIPE_FILE, ROLLOUT_FILE)
"""How the checkpoint was trained; copied into the export when the checkpoint (or the training
output folder holding a ``checkpoint-N``) has them."""

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


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
    if Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise ExportError(f"{out_dir}: is a file; the export goes into a folder")
    base: str | None = None
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
    out = save_model(model, tokenizer, out_dir, merge_lora=True)
    copied = copy_settings(ckpt, out)
    write_model_card(out, base or base_model or _recipe_base(out), copied)
    return out


def copy_settings(checkpoint: Path, out: Path) -> list[str]:
    """Copy `SETTINGS_FILES` from the checkpoint, or from the training folder above a ``checkpoint-N``."""
    copied = []
    for name in SETTINGS_FILES:
        for folder in (checkpoint, checkpoint.parent):
            if (folder / name).is_file():
                shutil.copyfile(folder / name, out / name)
                copied.append(name)
                break
    return copied


def _recipe_base(folder: Path) -> str | None:
    """The ``model.path`` a copied recipe trained from, when it names one."""
    recipe = folder / RECIPE_FILE
    if not recipe.is_file():
        return None
    import yaml

    try:
        data = yaml.safe_load(recipe.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError):
        return None
    model = data.get("model") if isinstance(data, dict) else None
    path = model.get("path") if isinstance(model, dict) else None
    return path if isinstance(path, str) and path else None


def model_card(name: str, base_model: str | None, settings: list[str]) -> str:
    """README.md of an exported agent: what it does, how to serve it, what it was trained from.

    The base model is named only when known; a hub id is linked and recorded in the card metadata,
    a local folder is named as text (a link to it would point nowhere).

    >>> "fine-tuned version of" in model_card("agent", None, [])
    False
    >>> "[Qwen/Qwen2.5-7B-Instruct](https://huggingface.co/Qwen/Qwen2.5-7B-Instruct)" in model_card("a", "Qwen/Qwen2.5-7B-Instruct", [])
    True
    """
    on_hub = bool(base_model) and _HUB_ID.match(base_model) is not None and not Path(base_model).exists()
    meta = ["---", "library_name: transformers", "pipeline_tag: text-generation",
            "tags: [awarl, awa-rl, search-agent, tool-use, abstention]"]
    if on_hub:
        meta.append(f"base_model: {base_model}")
    lines = [*meta, "---", "", f"# {name}", "",
             "A search agent trained with awarl (AWA-RL). It calls the tool `search(query)` in the chat "
             "template's tool-call format, then answers inside `<answer>…</answer>` followed by the ids of the "
             "passages it relies on in square brackets, or answers `<answer>not enough information</answer>` when "
             "the passages do not settle the question.", ""]
    if on_hub:
        lines += [f"This model is a fine-tuned version of [{base_model}](https://huggingface.co/{base_model}).", ""]
    elif base_model:
        lines += [f"This model is a fine-tuned version of `{base_model}` (a local checkpoint).", ""]
    lines += ["## Use", "", "```bash",
              f"vllm serve {name} --enable-auto-tool-choice --tool-call-parser hermes",
              f"awarl eval run --model {name} --data records.jsonl --out runs/{name}",
              "```", ""]
    if settings:
        lines += ["## Training", "", "How it was trained travels with it: "
                  + ", ".join(f"`{s}`" for s in settings)
                  + " (the resolved recipe and the rollout settings to serve it under).", ""]
    return "\n".join(lines)


def write_model_card(out: Path, base_model: str | None, settings: list[str]) -> Path:
    path = out / "README.md"
    path.write_text(model_card(out.name, base_model, settings), encoding="utf-8")
    return path
