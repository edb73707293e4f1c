"""AWA-RL GRPO: TRL's ``GRPOTrainer`` with the search tool, the AWA reward and checkpointed penalty.

`main` reads top to bottom in named stages:

1. `load_training_records` — records with the capability column ``p`` (refuses to start, with
   the fix, when the reward needs ``p`` and it is missing);
2. `build_dataset` — one row per question: the protocol's prompt plus the columns the rewards
   and the environment read (answers, answerable, supporting, passages, p, id);
3. `configure_env` — the retriever ``SearchEnv`` shares at class level;
4. `build_rewards` — `awarl.rewards.build_reward_funcs`, the stateful answer/abstain reward first;
5. `grpo_args` — TRL ``GRPOConfig`` from the recipe's ``grpo`` section plus awarl's defaults;
6. the trainer, with the penalty-state and summary callbacks; `resume_checkpoint` restores the
   penalty state before TRL restores weights, optimizer, RNG and data position;
7. the final model saved with its tokenizer and chat template.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from awarl.protocol import build_messages
from awarl.data.records import DataError, QARecord, iter_jsonl, load_records
from awarl.train.config import ConfigError, TrainConfig

log = logging.getLogger(__name__)


# -- stage 1: records ----------------------------------------------------------------------------------------
def load_training_records(config: TrainConfig) -> list[QARecord]:
    """Records with ``meta[p_field]`` set from the records themselves or the capability file."""
    data = config.data
    if not data.records:
        raise ConfigError("data.records is empty: set it to records.jsonl from `awarl data prepare`")
    records = load_records(data.records)
    if data.limit:
        records = records[: data.limit]
    if not records:
        raise DataError(data.records, "-", "no records")
    if data.capability:
        capability = _read_capability(data.capability, data.p_field)
        for rec in records:
            if rec.id in capability:
                rec.meta[data.p_field] = capability[rec.id]
    needs_p = config.reward.kind == "awa"
    missing = [r.id for r in records if not isinstance(r.meta.get(data.p_field), (int, float))]
    if missing and needs_p:
        source = data.capability or data.records
        raise ConfigError(
            f"{source}: {len(missing)} of {len(records)} records have no capability '{data.p_field}' "
            f"(first: {missing[:3]}). The AWA reward needs it. Fix: run `awarl capability estimate` on these "
            f"records with the starting checkpoint and set data.capability to its output (or add a "
            f"'{data.p_field}' field to every record), or train a baseline with reward.kind static/ternary/none.")
    return records


def _read_capability(path: str, p_field: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for lineno, row in iter_jsonl(path):
        if not isinstance(row.get("id"), str):
            raise DataError(path, f"line {lineno}", "expected a string id", "id")
        p = row.get(p_field, row.get("p_i"))
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
            raise DataError(path, f"line {lineno}", f"capability must be a number in [0, 1], got {p!r}", p_field)
        out[row["id"]] = float(p)
    return out


# -- stage 2: dataset ----------------------------------------------------------------------------------------
def build_dataset(records: Sequence[QARecord], config: TrainConfig):
    """A ``datasets.Dataset``: ``prompt`` (system + question) and the columns rewards and
    environment read. ``p`` is NaN-free: absent only when no reward needs it."""
    from datasets import Dataset

    p_field = config.data.p_field
    rows = []
    for rec in records:
        row = {
            "prompt": build_messages(rec.question, config.data.system_prompt),
            "id": rec.id,
            "answers": list(rec.answers),
            "answerable": rec.answerable,
            "supporting": list(rec.supporting),
            "passages": list(rec.passages),
            "dataset": rec.dataset,
        }
        if isinstance(rec.meta.get(p_field), (int, float)):
            row["p"] = float(rec.meta[p_field])
        rows.append(row)
    if len({("p" in r) for r in rows}) > 1:
        rows = [{k: v for k, v in r.items() if k != "p"} for r in rows]  # a partial column would hold nulls
    return Dataset.from_list(rows)


# -- stage 3: environment ------------------------------------------------------------------------------------
def configure_env(config: TrainConfig) -> type:
    """Give ``SearchEnv`` its class-level retriever and limits; returns the class (the factory)."""
    from awarl.agent.env import SearchEnv

    data = config.data
    if data.retriever_url:
        from awarl.search.client import HttpRetriever

        retriever = HttpRetriever(data.retriever_url)
    elif data.index:
        from awarl.search.index import load_index

        retriever = load_index(data.index)
    elif data.corpus:
        from awarl.data.records import load_corpus
        from awarl.search.bm25 import BM25Index

        retriever = BM25Index.build(load_corpus(data.corpus))
    else:
        raise ConfigError("the search tool needs data.corpus, data.index or data.retriever_url")
    return SearchEnv.configure(retriever, topk=config.env.topk, max_searches=config.env.max_searches,
                               max_tokens=config.env.max_passage_words, scope=data.scope)


# -- stage 4: rewards ----------------------------------------------------------------------------------------
def build_rewards(config: TrainConfig) -> tuple[list[Callable], list[float], Any]:
    """Reward functions, their weights, and the stateful answer/abstain reward whose penalty
    state is checkpointed."""
    from awarl.rewards import answer_abstain_reward, build_reward_funcs

    funcs, weights = build_reward_funcs(config.reward)
    return funcs, weights, answer_abstain_reward(funcs)


# -- stage 5: trainer arguments ------------------------------------------------------------------------------
def grpo_args(config: TrainConfig, output_dir: str | None = None, reward_weights: list[float] | None = None):
    """TRL ``GRPOConfig``: awarl's defaults, overridden by the recipe's ``grpo`` section."""
    import torch
    from trl import GRPOConfig

    from awarl.train.callbacks import report_to

    on_gpu = torch.cuda.is_available() and not config.grpo.get("use_cpu", False)
    kwargs: dict[str, Any] = {
        "output_dir": output_dir or config.output_dir,
        "seed": config.seed,
        "data_seed": config.seed,
        "report_to": report_to(config.logging),
        "logging_steps": 1,
        "max_tool_calling_iterations": config.env.max_searches,
        "bf16": on_gpu,  # TRL's default bf16=True means CPU autocast on a CPU box
        "use_cpu": not on_gpu,
        # TRL turns gradient checkpointing on by default; transformers >= 5.18 renames the flag
        # (activation_checkpointing), so set it only through the recipe.
        "gradient_checkpointing": False,
    }
    if reward_weights is not None:
        kwargs["reward_weights"] = reward_weights
    kwargs.update(config.grpo)
    return GRPOConfig(**kwargs)


# -- model ---------------------------------------------------------------------------------------------------
def load_model_and_tokenizer(config: TrainConfig, path: str | None = None):
    """The starting checkpoint and its tokenizer (the chat template must be present)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = path or config.model.path
    if not path:
        raise ConfigError("model.path is empty: set it to a model folder or hub id")
    dtype = config.model.dtype
    if dtype == "auto":
        dtype = "bfloat16" if torch.cuda.is_available() else "float32"
    kwargs: dict[str, Any] = {"dtype": getattr(torch, dtype)}
    if config.model.attn_implementation:
        kwargs["attn_implementation"] = config.model.attn_implementation
    tokenizer = AutoTokenizer.from_pretrained(path)
    if not tokenizer.chat_template:
        raise ConfigError(f"{path}: the tokenizer has no chat template; the tool loop needs one (an Instruct model)")
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    return model, tokenizer


def peft_config(config: TrainConfig):
    """A peft ``LoraConfig`` when ``model.lora`` is on, else None."""
    if not config.model.lora:
        return None
    from peft import LoraConfig

    m = config.model
    return LoraConfig(r=m.lora_r, lora_alpha=m.lora_alpha, lora_dropout=m.lora_dropout,
                      target_modules=list(m.lora_target_modules), task_type="CAUSAL_LM")


# -- resume --------------------------------------------------------------------------------------------------
_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")


def resume_checkpoint(resume: str | None, output_dir: str | Path) -> Path | None:
    """``None`` (fresh run), ``"latest"`` (the newest checkpoint in ``output_dir``) or a path."""
    if not resume:
        return None
    if resume != "latest":
        path = Path(resume)
        if not (path / "trainer_state.json").exists():
            raise ConfigError(f"--resume {resume}: not a training checkpoint (no trainer_state.json)")
        return path
    found = sorted((int(m.group(1)), p) for p in Path(output_dir).glob("checkpoint-*")
                   if (m := _CHECKPOINT_RE.match(p.name)) and (p / "trainer_state.json").exists())
    if not found:
        raise ConfigError(f"--resume latest: no checkpoint-N folder in {output_dir}; start without --resume")
    return found[-1][1]


# -- main ----------------------------------------------------------------------------------------------------
def build_trainer(config: TrainConfig, output_dir: str | None = None, extra_callbacks: Sequence[Any] = (),
                  on_log: Callable[[str], None] | None = None):
    """Stages 1-5 and the trainer; returns ``(trainer, stateful_reward)``."""
    from trl import GRPOTrainer

    from awarl.train.callbacks import PenaltyStateCallback, SummaryCallback, configure_logging

    config.check_trainer_fields()
    out = output_dir or config.output_dir
    configure_logging(config.logging, out)
    records = load_training_records(config)
    dataset = build_dataset(records, config)
    env_factory = configure_env(config)
    funcs, weights, stateful = build_rewards(config)
    args = grpo_args(config, out, weights)
    model, tokenizer = load_model_and_tokenizer(config)
    callbacks = [PenaltyStateCallback(stateful), *extra_callbacks]
    if config.logging.summary:
        callbacks.append(SummaryCallback(printer=on_log))
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=funcs,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        environment_factory=env_factory,
        peft_config=peft_config(config),
        callbacks=callbacks,
    )
    return trainer, stateful


def main(config: TrainConfig, *, resume: str | None = None, output_dir: str | None = None,
         on_log: Callable[[str], None] | None = None, extra_callbacks: Sequence[Any] = ()) -> Path:
    """Train; returns the folder of the final model (weights, tokenizer, chat template)."""
    from awarl.train.callbacks import load_penalty_state
    from awarl.train.export import save_model

    out = Path(output_dir or config.output_dir)
    trainer, stateful = build_trainer(config, str(out), extra_callbacks, on_log=on_log)
    checkpoint = resume_checkpoint(resume, out)
    if checkpoint is not None:
        saved = load_penalty_state(stateful, checkpoint)
        log.info("resuming from %s (step %s, penalty %s)", checkpoint, saved["global_step"], saved["penalty"])
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    final = out / "final"
    if config.model.lora:
        if trainer.accelerator.is_main_process:
            model = trainer.accelerator.unwrap_model(trainer.model)
            save_model(model, trainer.processing_class, final, merge_lora=True)
    else:
        trainer.save_model(str(final))  # every process calls it: ZeRO-3 gathers the shards here
    trainer.accelerator.wait_for_everyone()
    return final
