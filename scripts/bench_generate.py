"""Generated tokens per second of a model folder at batch 1 and batched, in one run.

    python scripts/bench_generate.py runs/smollm2/base [--batches 1 8 16] [--new-tokens 64] [--rounds 2]

Each row generates exactly ``--new-tokens`` tokens (``min_new_tokens = max_new_tokens``, sampling at
T = 1) after the agent's real prompt (the search tool's schema under the `qwen2_5` template and a
world question), for every prompt of the batch; the first round of each batch size is a warm-up and is
not counted. Prints a Markdown table: seconds per round (median), tokens/s and the speed-up over batch 1.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path, help="a model folder (e.g. `awarl model import-gguf` output)")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 16])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2, help="timed rounds per batch size (after one warm-up)")
    parser.add_argument("--chat-template", default="qwen2_5")
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from awarl.agent.chat_template import use_chat_template
    from awarl.protocol import build_messages
    from awarl.train.sft import search_tool_schema

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    use_chat_template(tokenizer, args.chat_template, str(args.model))
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    messages = build_messages("In which country was Pela Zark born?")
    prompt = tokenizer.apply_chat_template(messages, tools=[search_tool_schema()], tokenize=False,
                                           add_generation_prompt=True)
    prompt_tokens = len(tokenizer(prompt)["input_ids"])
    print(f"{args.model}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters; prompt "
          f"{prompt_tokens} tokens; {args.new_tokens} new tokens per sequence; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, {platform.machine()}", file=sys.stderr)

    rows = []
    for batch in args.batches:
        inputs = tokenizer([prompt] * batch, return_tensors="pt", padding=True)
        times = []
        for round_ in range(args.rounds + 1):
            start = time.perf_counter()
            with torch.no_grad():
                out = model.generate(**inputs, do_sample=True, temperature=1.0, max_new_tokens=args.new_tokens,
                                     min_new_tokens=args.new_tokens, pad_token_id=tokenizer.pad_token_id)
            if round_:
                times.append(time.perf_counter() - start)
            assert out.shape[1] - inputs["input_ids"].shape[1] == args.new_tokens
        seconds = statistics.median(times)
        rows.append((batch, seconds, batch * args.new_tokens / seconds))
    base = rows[0][2]
    print(f"| batch | s per round (median of {args.rounds}) | tokens/s | vs batch {rows[0][0]} |")
    print("|---:|---:|---:|---:|")
    for batch, seconds, rate in rows:
        print(f"| {batch} | {seconds:.2f} | {rate:.1f} | {rate / base:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
