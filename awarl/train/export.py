"""Save a trained model so `vllm serve` and the runner load it directly.

The exported folder holds full weights (LoRA adapters merged), the tokenizer and its chat
template (TRL's tool loop and vLLM's ``hermes`` tool parser both depend on it), and the
generation config with ``<|im_end|>`` as a stop token. It also carries the training recipe and
rollout settings when the checkpoint has them (so the exported agent is served under the settings
it was trained with) and a model card of its own: TRL's draft card names the base model only when
it was a hub id, and reads "fine-tuned version of [None]" for a local one. The card follows TRL's
conventions (tags ``trl``, ``grpo``, ``awarl``; ``base_model`` for a hub id) and adds the recipe's
reward and rollout settings, the refusal phrase, and a ``model-index`` with RA-F1 / precision /
accuracy / refusal rate of the evaluation runs made with the checkpoint (``--eval-run``), so it
goes to the hub unchanged (``HfApi().upload_folder``; awarl never uploads).
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from awarl.agent.settings import RECIPE_FILE, ROLLOUT_FILE
from awarl.errors import AwarlError
from awarl.protocol import ABSTAIN_PHRASE

log = logging.getLogger(__name__)


class ExportError(AwarlError, RuntimeError):
    """A checkpoint that cannot be exported (a bad checkpoint or output path given on the command
    line, exit code 2); the message says what is missing."""

    exit_code = 2


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
                      dtype: str = "auto", eval_runs: Sequence[str | Path] = ()) -> Path:
    """Export a training checkpoint (full weights or a LoRA adapter folder) to ``out_dir``; the model
    card's model-index holds the ``eval_runs`` (``awarl eval run`` folders of this checkpoint)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ckpt = Path(checkpoint)
    dtypes = {"auto": "auto", "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in dtypes:
        raise ExportError(f"--dtype must be one of {', '.join(dtypes)}, got {dtype!r}")
    if not ckpt.is_dir():
        raise ExportError(f"{ckpt}: checkpoint folder not found")
    if Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise ExportError(f"{out_dir}: is a file; the export goes into a folder")
    runs = checkpoint_eval_runs(eval_runs, ckpt, Path(out_dir))  # checked before the slow part
    base: str | None = None
    torch_dtype = dtypes[dtype]
    if (ckpt / "adapter_config.json").exists():
        from peft import PeftConfig, PeftModel

        base = base_model or PeftConfig.from_pretrained(str(ckpt)).base_model_name_or_path
        if not base:
            raise ExportError(f"{ckpt}: LoRA adapter without a base model; pass --base-model")
        if not base_model and not Path(base).is_dir():
            # the adapter names its base as training named it, often relative to the folder training ran in
            # (a demo's "sft/final"): look for it beside the checkpoint and in the folders above it
            base = next((str(b / base) for b in (ckpt, *ckpt.resolve().parents) if (b / base / "config.json").exists()),
                        base)
        try:  # offline: a base that is neither a folder here nor in the local hub cache is an error, not a download
            loaded = AutoModelForCausalLM.from_pretrained(base, dtype=torch_dtype, local_files_only=True)
        except OSError:
            raise ExportError(f"{ckpt}: the adapter's base model {base!r} is neither a model folder here nor in the "
                              "local model cache; pass --base-model PATH") from None
        model = PeftModel.from_pretrained(loaded, str(ckpt))
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
    write_model_card(out, base or base_model or _recipe_base(out), copied, eval_runs=runs)
    return out


def checkpoint_eval_runs(folders: Sequence[str | Path], checkpoint: Path, out: Path) -> list[dict[str, Any]]:
    """The ``metrics.json`` of each evaluation run, refusing a run of another model: its ``--model``
    must name the checkpoint (or the export folder). A run against an endpoint (``openai:…``) cannot
    be checked, and is taken with a warning."""
    from awarl.data.records import DataError
    from awarl.integrations.hub import read_eval_runs
    from awarl.llm.spec import checkpoint_folder

    try:
        runs = read_eval_runs(folders)
    except DataError as exc:
        raise ExportError(str(exc)) from None
    mine = {checkpoint.resolve(), out.resolve()}
    for folder, run in zip(folders, runs):
        model = str(run.get("model") or "")
        used = checkpoint_folder(model)
        if used is None:
            log.warning("%s: evaluated %r, an endpoint or hub id; its numbers go into the model card as this "
                        "checkpoint's (make sure it served this checkpoint)", folder, model)
        elif used.resolve() not in mine:
            raise ExportError(f"{folder}: evaluated {model!r}, not the checkpoint {checkpoint}; the model card lists "
                              f"only runs of this checkpoint (drop --eval-run {folder})")
    return runs


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
    from awarl.config_fields import ConfigError, read_yaml_file

    try:
        data = read_yaml_file(recipe) or {}
    except ConfigError:
        return None
    model = data.get("model") if isinstance(data, dict) else None
    path = model.get("path") if isinstance(model, dict) else None
    return path if isinstance(path, str) and path else None


CARD_TAGS = ["trl", "grpo", "awarl", "awa-rl", "search-agent", "tool-use", "abstention"]
"""Tags of an exported agent's card: TRL's (``trl``, ``grpo``) and awarl's."""

_TRL_CITATION = """@software{vonwerra2020trl,
  title   = {{TRL: Transformers Reinforcement Learning}},
  author  = {von Werra, Leandro and Belkada, Younes and Tunstall, Lewis and Beeching, Edward and Thrush, Tristan and Lambert, Nathan and Huang, Shengyi and Rasul, Kashif and Gallou{\\'e}dec, Quentin},
  license = {Apache-2.0},
  url     = {https://github.com/huggingface/trl},
  year    = {2020}
}"""
_GRPO_CITATION = """@article{shao2024deepseekmath,
  title   = {{DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models}},
  author  = {Zhihong Shao and Peiyi Wang and Qihao Zhu and Runxin Xu and Junxiao Song and Mingchuan Zhang and Y. K. Li and Y. Wu and Daya Guo},
  year    = {2024},
  eprint  = {arXiv:2402.03300}
}"""


def model_card(name: str, base_model: str | None, settings: list[str], *, reward: dict[str, Any] | None = None,
               rollout: dict[str, Any] | None = None, eval_runs: Sequence[dict[str, Any]] = ()) -> str:
    """README.md of an exported agent: what it does, how to serve it, what it was trained from, with
    what reward and rollout settings, and how it scored (``eval_runs``: ``metrics.json`` contents).

    The base model is named only when known; a hub id is linked and recorded in the card metadata,
    a local folder is named as text (a link to it would point nowhere). The metadata holds TRL's
    tags, the ``model-index`` of ``eval_runs`` and, under ``awarl:``, the refusal phrase and the
    reward and rollout settings.

    >>> "fine-tuned version of" in model_card("agent", None, [])
    False
    >>> "[Qwen/Qwen2.5-7B-Instruct](https://huggingface.co/Qwen/Qwen2.5-7B-Instruct)" in model_card("a", "Qwen/Qwen2.5-7B-Instruct", [])
    True
    """
    from huggingface_hub import ModelCard, ModelCardData

    from awarl.integrations.hub import METRICS, cell, model_index

    on_hub = bool(base_model) and _HUB_ID.match(base_model) is not None and not Path(base_model).exists()
    phrases = list((rollout or {}).get("refusal_phrases") or [ABSTAIN_PHRASE])
    refusal = ABSTAIN_PHRASE if ABSTAIN_PHRASE in phrases else phrases[0]
    awarl_meta: dict[str, Any] = {"refusal_phrase": refusal, "refusal_phrases": phrases}
    if reward:
        awarl_meta["reward"] = reward
    if rollout:
        awarl_meta["rollout"] = {k: v for k, v in rollout.items() if k != "system_prompt"}
    data = ModelCardData(library_name="transformers", pipeline_tag="text-generation", model_name=name,
                         base_model=base_model if on_hub else None, tags=list(CARD_TAGS),
                         eval_results=model_index(eval_runs) or None, awarl=awarl_meta)
    lines = [f"# {name}", "",
             "A search agent trained with awarl (AWA-RL). It calls the tool `search(query)` in the chat "
             "template's tool-call format, then answers inside `<answer>…</answer>` followed by the ids of the "
             f"passages it relies on in square brackets, or answers `<answer>{refusal}</answer>` when "
             "the passages do not settle the question.", ""]
    if on_hub:
        lines += [f"This model is a fine-tuned version of [{base_model}](https://huggingface.co/{base_model}).", ""]
    elif base_model:
        lines += [f"This model is a fine-tuned version of `{base_model}` (a local checkpoint).", ""]
    lines += ["It has been trained using [TRL](https://github.com/huggingface/trl) (GRPO) with awarl's "
              "answer/abstain reward.", "",
              "## Use", "", "```bash",
              f"vllm serve {name} --enable-auto-tool-choice --tool-call-parser hermes",
              f"awarl eval run --model {name} --data records.jsonl --out runs/{name}",
              "```", "",
              "## Abstention", "",
              f"The agent abstains with the answer `{refusal}`. These answers (after SQuAD normalisation) count as "
              "abstentions when it is scored: " + ", ".join(f"`{p}`" for p in phrases) + ". An empty answer is "
              "a wrong answer, never an abstention.", ""]
    if eval_runs:
        lines += ["## Evaluation", "", "| run | data set | " + " | ".join(label for _, label in METRICS)
                  + " | abstain-recall |", "|---|---|" + "---|" * (len(METRICS) + 1)]
        for run in eval_runs:
            for dataset, m in (run.get("per_dataset") or {}).items():
                cells = [cell(m.get(key)) for key, _ in METRICS] + [cell(m.get("abstain_recall"))]
                lines.append(f"| {run.get('name')} | {dataset} | " + " | ".join(cells) + " |")
        lines += ["", "RA-F1 = 2PA / (P + A) with precision P = correct / answered and accuracy A = correct / "
                  "all (awarl's scorer, exact match unless the rollout metric says f1).", ""]
    if settings or reward or rollout:
        lines += ["## Training", ""]
        if settings:
            lines += ["How it was trained travels with it: " + ", ".join(f"`{s}`" for s in settings)
                      + " (the resolved recipe and the rollout settings to serve it under).", ""]
        for title, values in (("Reward", reward), ("Rollout", rollout)):
            if values:
                lines += [f"{title} settings:", "", "| setting | value |", "|---|---|"]
                lines += [f"| {k} | {cell(v)} |" for k, v in values.items()
                          if k != "system_prompt" and not isinstance(v, dict)]
                lines.append("")
    lines += ["### Framework versions", ""]
    lines += [f"- {label}: {_version(dist)}" for label, dist in
              (("awarl", "awarl"), ("TRL", "trl"), ("Transformers", "transformers"), ("Pytorch", "torch"))]
    lines += ["", "## Citations", "", "Cite GRPO as:", "", "```bibtex", _GRPO_CITATION, "```", "",
              "Cite TRL as:", "", "```bibtex", _TRL_CITATION, "```", ""]
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines)).content


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


def _card_settings(out: Path) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The reward section of the copied recipe and the rollout settings, resolved (None when absent)."""
    from awarl.agent.settings import load_rollout
    from awarl.config_fields import ConfigError
    from awarl.rewards.config import RewardConfig

    reward = rollout = None
    try:
        rollout = load_rollout(out).resolved()
    except ConfigError:
        pass
    if (out / RECIPE_FILE).is_file():
        try:
            reward = RewardConfig.from_yaml(out / RECIPE_FILE).to_dict()
        except ConfigError as exc:
            log.warning("%s: the model card leaves out the reward settings (%s)", out / RECIPE_FILE, exc)
    return reward, rollout


def write_model_card(out: Path, base_model: str | None, settings: list[str],
                     eval_runs: Sequence[dict[str, Any]] = ()) -> Path:
    """``out/README.md``, with the reward and rollout settings copied into ``out`` and ``eval_runs``."""
    reward, rollout = _card_settings(out)
    path = out / "README.md"
    path.write_text(model_card(out.name, base_model, settings, reward=reward, rollout=rollout, eval_runs=eval_runs),
                    encoding="utf-8")
    return path
