"""A tiny Qwen2-shaped model and tokenizer built offline, and a short warm start.

Tests, the README's first command and laptop demos need a model that runs in seconds on a CPU
and speaks the real protocol: Qwen2.5's chat template (the one TRL recognises for tool calls),
``<|im_end|>`` as end of turn, ``<tool_call>`` JSON. Nothing is downloaded: the byte-level BPE
tokenizer is trained here on the texts it will see, with Qwen2's own normaliser and
pre-tokeniser so that ``AutoTokenizer.from_pretrained`` rebuilds it identically on reload.

A randomly initialised model never calls the tool, so `warm_start` runs a short supervised pass
on gold conversations (assistant tokens only carry loss) before anything else uses it.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]


@dataclass(frozen=True)
class TinyShape:
    """Model size; the defaults build a ~0.5 M-parameter model that trains at a few steps/s on 2 cores."""

    vocab_size: int = 2048
    hidden_size: int = 96
    intermediate_size: int = 256
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 4096


def protocol_texts() -> list[str]:
    """Strings the tokenizer must handle well whatever the corpus: template, prompt, tool calls."""
    from trl.chat_template_utils import qwen2_5_chat_template

    from awarl.agent.protocol import ABSTAIN_PHRASE, SYSTEM_PROMPT

    call = json.dumps({"name": "search", "arguments": {"query": "who wrote Hamlet"}})
    return [
        qwen2_5_chat_template,
        SYSTEM_PROMPT,
        f"<tool_call>\n{call}\n</tool_call>",
        f"<answer>{ABSTAIN_PHRASE}</answer>",
        '{"type": "function", "function": {"name": "search", "description": "Search", "parameters": '
        '{"type": "object", "properties": {"query": {"type": "string", "description": "query"}}, "required": ["query"]}}}',
    ] * 20


def build_tiny_model(out_dir: str | Path, texts: Iterable[str], shape: TinyShape = TinyShape(), seed: int = 0) -> Path:
    """Train a tokenizer on ``texts`` (plus the protocol's own strings), build a random tiny Qwen2
    model sized to it, and save both (with TRL's qwen2_5 chat template) to ``out_dir``."""
    import torch
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2Config
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX
    from trl.chat_template_utils import qwen2_5_chat_template

    torch.manual_seed(seed)
    tok = Tokenizer(models.BPE())
    # Qwen2Tokenizer rebuilds exactly this pipeline from vocab + merges on reload.
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=shape.vocab_size - len(TOOL_TOKENS),
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([*protocol_texts(), *texts], trainer=trainer)
    # Qwen marks the tool tags as added, not special, so skip_special_tokens keeps them.
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
        padding_side="left",
        truncation_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=shape.max_position_embeddings,
    )
    hf_tok.chat_template = qwen2_5_chat_template  # byte-identical, so TRL's tool loop recognises it

    eos_id = hf_tok.convert_tokens_to_ids("<|im_end|>")
    config = Qwen2Config(
        vocab_size=((len(hf_tok) + 63) // 64) * 64,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        max_position_embeddings=shape.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=hf_tok.pad_token_id,
    )
    model = AutoModelForCausalLM.from_config(config)
    model.generation_config.eos_token_id = [eos_id, hf_tok.pad_token_id]
    model.generation_config.pad_token_id = hf_tok.pad_token_id
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    hf_tok.save_pretrained(out)
    return out


def assistant_labels(tokenizer: Any, messages: Sequence[dict], tools: Sequence[Callable] | None) -> tuple[list[int], list[int]]:
    """Token ids of a conversation and labels that keep only assistant turns (tool results,
    system and user text get -100). Turn boundaries come from rendering growing prefixes."""
    ids: list[int] = []
    labels: list[int] = []
    for end in range(1, len(messages) + 1):
        rendered = tokenizer.apply_chat_template(list(messages[:end]), tools=tools, tokenize=True, return_dict=False)
        new = rendered[len(ids):]
        if rendered[: len(ids)] != ids:
            raise ValueError("chat template is not prefix-preserving; cannot mask per turn")
        is_assistant = messages[end - 1]["role"] == "assistant"
        if is_assistant:
            # The "<|im_start|>assistant\n" header is prompt, not response.
            header = len(tokenizer("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"])
            labels += [-100] * header + new[header:]
        else:
            labels += [-100] * len(new)
        ids = rendered
    return ids, labels


def warm_start(
    model_dir: str | Path,
    out_dir: str | Path,
    conversations: Sequence[Sequence[dict]],
    tools: Sequence[Callable] | None,
    *,
    steps: int = 300,
    batch_size: int = 8,
    lr: float = 3e-3,
    seed: int = 0,
    log: Callable[[str], None] | None = None,
) -> Path:
    """A short assistant-only supervised pass so a random tiny model learns the protocol (call
    ``search``, then answer with citations or abstain). For real cold starts use ``awarl train sft``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    examples = [assistant_labels(tok, conv, tools) for conv in conversations]
    if not examples:
        raise ValueError("warm_start needs at least one conversation")
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20) * 0.5 * (1 + math.cos(math.pi * s / steps)))
    rng = random.Random(seed)
    model.train()
    t0 = time.time()
    for step in range(steps):
        batch = [examples[rng.randrange(len(examples))] for _ in range(batch_size)]
        width = max(len(ids) for ids, _ in batch)
        input_ids = torch.full((len(batch), width), tok.pad_token_id)
        labels = torch.full((len(batch), width), -100)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, (ids, lab) in enumerate(batch):
            input_ids[row, : len(ids)] = torch.tensor(ids)
            labels[row, : len(lab)] = torch.tensor(lab)
            mask[row, : len(ids)] = 1
        loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        if log and (step % 50 == 0 or step == steps - 1):
            log(f"warm start step {step + 1}/{steps} loss {loss.item():.3f} ({time.time() - t0:.0f}s)")
    out = Path(out_dir)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def search_tool() -> Callable:
    """The `search` tool exactly as training and the runner declare it (SearchEnv's method, whose
    docstring is the tool schema), bound to a bare instance: rendering needs only its signature."""
    from awarl.agent.env import SearchEnv

    return object.__new__(SearchEnv).search


def sample_texts(samples_dir: str | Path) -> list[str]:
    """Questions, answers and passages of the official-format files found in ``samples_dir``."""
    from awarl.data.adapters import load_dataset_file

    texts: list[str] = []
    for dataset, path in _sample_files(Path(samples_dir)):
        records, passages = load_dataset_file(dataset, path)
        texts += [r.question for r in records] + [a for r in records for a in r.answers]
        texts += [f"{p.title}: {p.text}" for p in passages]
    return texts


def _sample_files(samples_dir: Path) -> list[tuple[str, Path]]:
    found = [
        ("hotpotqa", samples_dir / "hotpotqa_dev_distractor_sample.json"),
        ("2wiki", samples_dir / "2wikimultihopqa_dev_sample.json"),
        ("musique", samples_dir / "musique_ans_dev_sample.jsonl"),
        ("musique", samples_dir / "musique_full_train_sample.jsonl"),
    ]
    return [(d, p) for d, p in found if p.exists()]


def gold_conversations(records, passages_by_id, *, max_words: int = 40, abstain_share: float = 0.3,
                       seed: int = 0) -> list[list[dict]]:
    """Protocol conversations built from gold evidence: ``search(question)`` returns the supporting
    passages and the model answers with citations; for unanswerable records, and for a share of
    answerable ones shown only distractors, the evidence is missing and the model abstains."""
    from awarl.agent.protocol import (
        ABSTAIN_PHRASE,
        build_messages,
        format_final,
        render_passage,
        tool_call_message,
        tool_result_message,
    )

    rng = random.Random(seed)
    convs = []
    for rec in records:
        gold = [pid for pid in rec.supporting if pid in passages_by_id]
        others = [pid for pid in rec.passages if pid not in rec.supporting and pid in passages_by_id]
        abstain = not rec.answerable or not gold or rng.random() < abstain_share
        shown = rng.sample(others, min(2, len(others))) if abstain else gold[:2]

        def line(pid: str) -> str:
            p = passages_by_id[pid]
            return render_passage(pid, p.title, " ".join(p.text.split()[:max_words]))

        final = format_final(ABSTAIN_PHRASE) if abstain else format_final(rec.answers[0], shown)
        convs.append([
            *build_messages(rec.question),
            tool_call_message(rec.question),
            tool_result_message("\n".join(line(pid) for pid in shown)),
            {"role": "assistant", "content": final},
        ])
    return convs


def warm_start_on_samples(model_dir: str | Path, out_dir: str | Path, samples_dir: str | Path, *, steps: int = 300,
                          log: Callable[[str], None] | None = None) -> Path:
    """Warm-start the tiny model on gold conversations of the shipped samples."""
    from awarl.data.adapters import load_dataset_file

    convs: list[list[dict]] = []
    for dataset, path in _sample_files(Path(samples_dir)):
        records, passages = load_dataset_file(dataset, path)
        convs += gold_conversations(records, {p.id: p for p in passages})
    return warm_start(model_dir, out_dir, convs, [search_tool()], steps=steps, log=log)


def _main() -> None:
    """``python -m awarl.llm.tiny --out DIR [--samples data/samples]``: build the random tiny model."""
    import argparse

    parser = argparse.ArgumentParser(description="Build a tiny offline Qwen2-shaped model and tokenizer.")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--samples", default="data/samples", help="folder of official-format samples to train the tokenizer on")
    args = parser.parse_args()
    texts = sample_texts(args.samples)
    if not texts:
        parser.error(f"no sample files found in {args.samples}")
    print(f"tiny model -> {build_tiny_model(args.out, texts)}")


if __name__ == "__main__":
    _main()
