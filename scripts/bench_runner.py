"""Rollout runner throughput: batched conversations vs one conversation at a time.

Runs the same greedy rollouts (so every setting produces the same trajectories, token for token)
over the shipped HotpotQA sample with the BM25 search tool, first one conversation at a time, then
with growing numbers of conversations in flight, and prints rollouts/s and the speed-up over the
one-at-a-time baseline measured in the same run.

    python scripts/bench_runner.py                      # tiny warm-started model (built if needed)
    python scripts/bench_runner.py --model PATH --questions 32 --concurrency 1 8 32
    python scripts/bench_runner.py --qwen05b --device cuda   # random Qwen2.5-0.5B-shaped model, bf16

``--qwen05b`` builds a randomly initialised model with Qwen2.5-0.5B's shape from its config alone
(nothing is downloaded) and uses the tiny tokenizer: it never calls the tool, so it measures raw
batched generation up to the token budget.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "data" / "samples"


def tiny_model(cache: Path) -> Path:
    """The tiny model warm-started on the shipped samples, built once into ``cache``."""
    from awarl.train.tiny import build_tiny_model, sample_texts, warm_start_on_samples

    base, sft = cache / "tiny", cache / "tiny-sft"
    if not (base / "config.json").exists():
        build_tiny_model(base, sample_texts(SAMPLES))
    if not (sft / "config.json").exists():
        warm_start_on_samples(base, sft, SAMPLES, log=print)
    return sft


def qwen05b_backend(tokenizer_dir: Path, device: str, batch_size: int):
    """transformers backend on a random model shaped like Qwen2.5-0.5B (config only), bf16 on CUDA."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config

    from awarl.llm.hf import HFGenerator

    tok = AutoTokenizer.from_pretrained(tokenizer_dir, padding_side="left")
    config = Qwen2Config(
        vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
        num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1000000.0, tie_word_embeddings=True,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=None,
    )
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    model = AutoModelForCausalLM.from_config(config, dtype=dtype).to(device)
    model.generation_config.eos_token_id = tok.eos_token_id
    return HFGenerator("qwen2.5-0.5b-shaped (random)", model_obj=model, tokenizer_obj=tok, device=device,
                       batch_size=batch_size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="checkpoint (default: the tiny warm-started model)")
    parser.add_argument("--cache", type=Path, default=ROOT / ".cache" / "bench-runner", help="where the tiny model is built")
    parser.add_argument("--questions", type=int, default=24, help="rollouts per setting (one per question)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8, 24], help="conversations in flight")
    parser.add_argument("--max-tokens", type=int, default=512, help="token budget per rollout")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds; the fastest round of each setting counts")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--qwen05b", action="store_true", help="random Qwen2.5-0.5B-shaped model instead")
    args = parser.parse_args()

    import torch

    from awarl.agent.runner import Rollout, Runner, RunnerConfig
    from awarl.agent.env import search_env_factory
    from awarl.agent.settings import RolloutSettings
    from awarl.data.adapters import load_dataset_file
    from awarl.llm.hf import HFGenerator
    from awarl.search.bm25 import BM25Index

    records, passages = load_dataset_file("hotpotqa", SAMPLES / "hotpotqa_dev_distractor_sample.json")
    records = records[: args.questions]
    env = search_env_factory(BM25Index.build(passages), RolloutSettings(scope="closed", topk=2, passage_words=40))
    model_dir = args.model or tiny_model(args.cache)
    top = max(args.concurrency)
    if args.qwen05b:
        backend = qwen05b_backend(model_dir, args.device, top)
    else:
        backend = HFGenerator(model_dir, device=args.device, batch_size=top)
    print(f"# model: {backend.name}  device: {args.device}  torch threads: {torch.get_num_threads()}  "
          f"rollouts per setting: {len(records)}  budget: {args.max_tokens} tokens", file=sys.stderr)

    Runner(backend, env, RunnerConfig(rollout=RolloutSettings(max_completion_tokens=32), max_concurrent=2)).run([Rollout(records[0])])  # warm-up
    settings = sorted(set(args.concurrency) | {1})  # one conversation at a time is the baseline
    best: dict[int, tuple[float, float]] = {}
    stats: dict[int, tuple[int, float]] = {}
    # Rounds interleave the settings and the best round counts, so a burst of load from other jobs on a
    # shared machine hits one round of every setting rather than one setting.
    for _ in range(args.repeats):
        for concurrency in settings:
            runner = Runner(backend, env, RunnerConfig(rollout=RolloutSettings(max_searches=2, max_completion_tokens=args.max_tokens), max_concurrent=concurrency))
            wall, cpu = time.perf_counter(), time.process_time()
            trajectories = runner.run([Rollout(r) for r in records])
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            old = best.get(concurrency, (float("inf"), float("inf")))
            best[concurrency] = (min(old[0], wall), min(old[1], cpu))
            stats[concurrency] = (sum(t.completion_tokens for t in trajectories),
                                  sum(t.searches for t in trajectories) / len(trajectories))
    n = len(records)
    base_wall, base_cpu = best[1]
    print("| conversations in flight | rollouts/s (wall) | model tokens/s | rollouts per CPU-s | searches/rollout "
          "| speed-up vs 1 (wall) | speed-up vs 1 (CPU) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for concurrency in settings:
        wall, cpu = best[concurrency]
        tokens, searches = stats[concurrency]
        print(f"| {concurrency} | {n / wall:.2f} | {tokens / wall:.0f} | {n / cpu:.2f} | {searches:.2f} "
              f"| {base_wall / wall:.2f}x | {base_cpu / cpu:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
