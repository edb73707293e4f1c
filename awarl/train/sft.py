"""Cold-start SFT: teach a model the agent protocol before GRPO.

Examples are whole agent conversations in the chat-template message format: system, question,
one or more ``search`` tool calls with their results, and a final ``<answer>…</answer>`` with
citations (or the abstain phrase). They are built either

- from **gold evidence** (`gold_conversations`): the question is searched and the results hold
  the supporting passages among a few of the record's other passages; the final message cites
  the supporting ids; unanswerable records end in an abstention; or
- from **runner trajectories** (`trajectory_conversations`): rollouts of a model, re-scored
  with the protocol scorer and kept when they were right (or abstained on an unanswerable
  question).

TRL's ``SFTTrainer`` trains on them with ``assistant_only_loss``: system, user and tool-result
tokens get label -100, so the model learns to call the tool and answer, never to imitate the
retriever.
"""

from __future__ import annotations

import copy
import json
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from awarl.protocol import (
    ABSTAIN_PHRASE,
    DEFAULT_REFUSAL_PHRASES,
    build_messages,
    format_final,
    score_text,
    tool_call_message,
    tool_result_message,
)
from awarl.data.records import DataError, Passage, QARecord, iter_jsonl, load_corpus, load_records
from awarl.train.config import ConfigError, TrainConfig

log = logging.getLogger(__name__)


@dataclass
class SFTData:
    """Conversations for SFT and what was left out (with the reason), so nothing vanishes silently."""

    conversations: list[list[dict]]
    skipped: dict[str, int]


# -- data ----------------------------------------------------------------------------------------------------
def gold_conversations(
    records: Sequence[QARecord],
    passages: dict[str, Passage],
    *,
    topk: int = 3,
    max_passage_words: int | None = None,
    system_prompt: str | None = None,
    abstain_share: float = 0.0,
    seed: int = 0,
) -> SFTData:
    """One conversation per record: search(question) -> passages -> cited answer, or abstain.

    Every search result shows ``topk`` passages: supporting ones first-come, filled with the
    record's other passages as distractors, in a seeded shuffled order. When the record needs
    more supporting passages than fit in one result, the agent searches again with the next
    passage's title (a multi-hop trajectory). Unanswerable records, and a share
    ``abstain_share`` of answerable ones shown only distractors, end in an abstention.
    """
    from awarl.search.retriever import Hit, render

    rng = random.Random(seed)
    out: list[list[dict]] = []
    skipped: dict[str, int] = {}
    for rec in records:
        missing = [pid for pid in rec.supporting if pid not in passages]
        if missing:
            skipped["supporting passage not in corpus"] = skipped.get("supporting passage not in corpus", 0) + 1
            continue
        if rec.answerable and (not rec.supporting or not rec.answers):
            skipped["answerable but no supporting passages or answers"] = (
                skipped.get("answerable but no supporting passages or answers", 0) + 1)
            continue
        evidence_missing = not rec.answerable or rng.random() < abstain_share
        support = [] if evidence_missing else list(rec.supporting)
        distractors = [pid for pid in rec.passages if pid in passages and pid not in rec.supporting]
        rng.shuffle(distractors)
        messages = build_messages(rec.question, system_prompt)
        per_call = max(1, topk - 1) if support else topk
        groups = [support[i:i + per_call] for i in range(0, len(support), per_call)] or [[]]
        for n, group in enumerate(groups):
            fill = [distractors.pop() for _ in range(min(topk - len(group), len(distractors)))]
            shown = group + fill
            rng.shuffle(shown)
            query = rec.question if n == 0 else passages[group[0]].title or rec.question
            messages.append(tool_call_message(query))
            hits = [Hit(passages[pid], 0.0) for pid in shown]
            messages.append(tool_result_message(render(hits, max_passage_words) or "No passages found."))
        final = format_final(ABSTAIN_PHRASE) if evidence_missing else format_final(rec.answers[0], support)
        messages.append({"role": "assistant", "content": final})
        out.append(messages)
    return SFTData(out, skipped)


def trajectory_conversations(
    path: str | Path,
    records: Sequence[QARecord],
    *,
    keep_outcomes: Sequence[str] = ("correct", "abstain"),
    abstain_only_unanswerable: bool = True,
    system_prompt: str | None = None,
    phrases: Sequence[str] = DEFAULT_REFUSAL_PHRASES,
    metric: str = "em",
) -> SFTData:
    """Runner trajectories re-scored with the protocol scorer against the records and kept by
    outcome. A row needs ``record_id`` (or ``id``) and ``messages``; when the messages are the
    completion only (as `awarl.agent.runner.Trajectory` stores them), the protocol's prompt is
    put in front."""
    by_id = {r.id: r for r in records}
    out: list[list[dict]] = []
    skipped: dict[str, int] = {}
    for lineno, row in iter_jsonl(path):
        where = f"line {lineno}"
        if not isinstance(row.get("messages"), list) or not row["messages"]:
            raise DataError(path, where, "expected a non-empty list of chat messages", "messages")
        rid = row.get("record_id", row.get("id"))
        rec = by_id.get(rid)
        if rec is None:
            raise DataError(path, where, f"record id {rid!r} is not in the training records", "record_id")
        messages = [m for m in row["messages"] if m.get("role") in ("system", "user", "assistant", "tool")]
        if messages and messages[0]["role"] not in ("system", "user"):
            messages = build_messages(rec.question, system_prompt) + messages
        if messages[-1].get("role") != "assistant":
            skipped["does not end with an assistant message"] = skipped.get("does not end with an assistant message", 0) + 1
            continue
        outcome = score_text(messages, rec.answers, answerable=rec.answerable, metric=metric, phrases=phrases).outcome
        keep = outcome in keep_outcomes and not (outcome == "abstain" and abstain_only_unanswerable and rec.answerable)
        if not keep:
            skipped[f"outcome {outcome}"] = skipped.get(f"outcome {outcome}", 0) + 1
            continue
        out.append([_clean_message(m) for m in messages])
    return SFTData(out, skipped)


def _clean_message(m: dict) -> dict:
    """Only the keys the chat template reads; tool-call arguments as a dict."""
    msg: dict[str, Any] = {"role": m["role"], "content": m.get("content") or ""}
    if m.get("tool_calls"):
        calls = []
        for call in m["tool_calls"]:
            fn = call.get("function", call)
            args = fn.get("arguments", {})
            calls.append({"type": "function",
                          "function": {"name": fn["name"], "arguments": json.loads(args) if isinstance(args, str) else args}})
        msg["tool_calls"] = calls
    if m["role"] == "tool":
        msg["name"] = m.get("name", "search")
    return msg


def search_tool_schema() -> dict:
    """The ``search`` tool's JSON schema, from `SearchEnv.search`'s signature and docstring."""
    from awarl.agent.env import tool_schema

    return tool_schema()


def to_dataset(conversations: Sequence[list[dict]], tools: Sequence[dict]):
    """A ``datasets.Dataset`` with ``messages`` and ``tools`` (JSON text: the schema's nested
    types would not fit one Arrow column type)."""
    from datasets import Dataset

    tools_json = json.dumps(list(tools))
    return Dataset.from_list([{"messages": c, "tools": tools_json} for c in conversations])


# -- training ------------------------------------------------------------------------------------------------
def build_sft_data(config: TrainConfig) -> SFTData:
    """Stage 1: the conversations the recipe asks for."""
    if not config.data.records:
        raise ConfigError("data.records is empty: set it to records.jsonl from `awarl data prepare`")
    records = load_records(config.data.records)
    if config.data.limit:
        records = records[: config.data.limit]
    if config.sft.source == "trajectories":
        return trajectory_conversations(config.sft.trajectories, records, keep_outcomes=config.sft.keep_outcomes,
                                        abstain_only_unanswerable=config.sft.abstain_only_unanswerable,
                                        system_prompt=config.rollout.prompt, phrases=config.rollout.phrases,
                                        metric=config.rollout.metric)
    if not config.data.corpus:
        raise ConfigError("sft.source 'gold' needs data.corpus (the passages the supporting ids point to)")
    passages = {p.id: p for p in load_corpus(config.data.corpus)}
    return gold_conversations(records, passages, topk=config.rollout.topk, max_passage_words=config.rollout.passage_words,
                              system_prompt=config.rollout.prompt, abstain_share=config.sft.abstain_share,
                              seed=config.seed)


def sft_args(config: TrainConfig, output_dir: str | None = None):
    """TRL ``SFTConfig`` from the recipe: awarl's defaults, then the recipe's ``sft.args``."""
    import torch
    from trl import SFTConfig

    from awarl.train.callbacks import report_to

    on_gpu = torch.cuda.is_available() and not config.sft.args.get("use_cpu", False)
    kwargs: dict[str, Any] = {
        "output_dir": output_dir or config.output_dir,
        "seed": config.seed,
        "assistant_only_loss": True,  # tool results, system and user text carry no loss
        "report_to": report_to(config.logging),
        "logging_steps": 1,
        "save_strategy": "no",
        "bf16": on_gpu,  # TRL's default bf16=True means CPU autocast on a CPU box
        "use_cpu": not on_gpu,
        # TRL's SFTConfig turns gradient checkpointing on by default: every step then runs the
        # forward twice. Off unless the recipe asks (profiled on the tiny world model: 1.6x faster
        # steps, see docs/benchmarks.md); as in grpo_args, the flag name differs across transformers.
        "gradient_checkpointing": False,
    }
    kwargs.update(config.sft.args)
    if not kwargs["assistant_only_loss"]:
        raise ConfigError("sft.args.assistant_only_loss must stay true: tool results must not be trained on")
    return SFTConfig(**kwargs)


def build_trainer(config: TrainConfig, output_dir: str | Path, on_log: Callable[[str], None] | None = None):
    """The data stage and a TRL ``SFTTrainer`` ready to train."""
    from trl import SFTTrainer

    from awarl.train.callbacks import SummaryCallback, configure_logging
    from awarl.train.grpo import load_model_and_tokenizer, peft_config
    from awarl.train.lm_head import use_plain_lm_head

    config.check_trainer_fields()
    configure_logging(config.logging, output_dir)
    data = build_sft_data(config)
    if data.skipped:
        log.warning("SFT data: left out %s", ", ".join(f"{n} ({why})" for why, n in data.skipped.items()))
    if not data.conversations:
        raise DataError(config.data.records, "-", "no SFT conversations to train on (every record was left out, "
                        "or there are none); check sft.source and its inputs")
    dataset = to_dataset(data.conversations, [search_tool_schema()])
    model, tokenizer = load_model_and_tokenizer(config, config.sft.init_from or config.model.path)
    trainer = SFTTrainer(
        model=model,
        args=sft_args(config, str(output_dir)),
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft_config(config),
        callbacks=[SummaryCallback(prefix="sft", printer=on_log)] if config.logging.summary else [],
    )
    use_plain_lm_head(trainer.model)  # on CPU: TRL's tiled head is most of a tiny model's step
    return trainer


def main(config: TrainConfig, output_dir: str | None = None, on_log: Callable[[str], None] | None = None,
         resume: str | None = None) -> Path:
    """Run cold-start SFT; the model, its tokenizer and chat template go to ``<output>/final``.
    ``resume`` ('latest' or a checkpoint folder) continues a run that saved checkpoints
    (``sft.args.save_strategy: steps``) from its step, optimizer and data position."""
    from awarl.train.grpo import resume_checkpoint, save_final

    out = Path(output_dir) if output_dir else config.sft_final().parent
    checkpoint = resume_checkpoint(resume, out)  # a bad --resume fails before anything is written
    if Path(config.sft.output_dir or "") != out:  # the recipe saved with the model names the folder SFT wrote to
        config = copy.deepcopy(config)
        config.sft.output_dir = str(out)
    trainer = build_trainer(config, out, on_log)
    config.save(out)
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    return save_final(trainer, config, out / "final")
