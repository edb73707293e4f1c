"""Step time of awarl's GRPO (AWA reward + citation reward + SearchEnv + callbacks) against plain
TRL GRPO with an EM-only reward and the same tool, model, data and settings, in the same process.

    python scripts/bench_train.py [--model DIR] [--steps 6] [--rounds 2]
    python scripts/bench_train.py --cuda      # on a GPU box: bf16 tiny recipe + Qwen2.5-0.5B-shaped LoRA

Runs alternate (plain, awarl, awarl, plain, …) so machine load drifts and warm caches hit both
alike. The
learning rate is 0 so both arms generate the same trajectories and the ratio measures only
awarl's overhead (reward bookkeeping, global gather, penalty, callbacks), not a difference in
what the models happened to write. The first step of every run (warm-up) is left out.
Prints a table; the target is awarl / plain <= 1.15.

With ``--cuda`` it instead times, on the GPU, (1) the tiny recipe in bf16 and (2) a randomly
initialised model with Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 heads, 2 KV heads,
MLP 4864; the tiny tokenizer's vocabulary) trained with LoRA — built from the config, nothing
downloaded.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]


def em_reward(completions, answers, **kwargs):
    """Plain baseline: 1 for an exact match, else 0 (the protocol's one scorer)."""
    from awarl.protocol import score_text

    return [score_text(c, golds).em for c, golds in zip(completions, answers)]


def prepare(work: Path, model: str | None) -> tuple[Path, Path, Path]:
    """records (with p) + corpus from the shipped HotpotQA sample; the tiny model."""
    from awarl.data.adapters import load_dataset_file
    from awarl.data.records import write_jsonl

    records, passages = load_dataset_file("hotpotqa", ROOT / "data/samples/hotpotqa_dev_distractor_sample.json")
    write_jsonl(work / "records.jsonl", [{**r.to_dict(), "p": 0.8 if i % 2 else 0.1} for i, r in enumerate(records)])
    write_jsonl(work / "corpus.jsonl", [p.to_dict() for p in passages])
    if model:
        return work / "records.jsonl", work / "corpus.jsonl", Path(model)
    cached = sorted((ROOT / ".cache/awarl-tests").glob("tiny-sft-*"), key=lambda p: p.stat().st_mtime)
    if cached:
        return work / "records.jsonl", work / "corpus.jsonl", cached[-1]
    from awarl.train.tiny import build_tiny_model, sample_texts

    print("no warm-started tiny model found (run the test suite once); using a random one", file=sys.stderr)
    return work / "records.jsonl", work / "corpus.jsonl", build_tiny_model(work / "tiny", sample_texts(ROOT / "data/samples"))


def run(arm: str, config, steps: int, out: Path) -> list[float]:
    from trl import GRPOTrainer

    from awarl.train import grpo
    from awarl.train.callbacks import StepTimer

    timer = StepTimer()
    if arm == "awarl":
        trainer, _ = grpo.build_trainer(config, str(out), extra_callbacks=[timer], on_log=lambda line: None)
    else:
        records = grpo.load_training_records(config)
        model, tokenizer = grpo.load_model_and_tokenizer(config)
        trainer = GRPOTrainer(model=model, reward_funcs=[em_reward], args=grpo.grpo_args(config, str(out)),
                              train_dataset=grpo.build_dataset(records, config), processing_class=tokenizer,
                              environment_factory=grpo.configure_env(config), callbacks=[timer])
    trainer.train()
    assert len(timer.times) == steps
    return timer.times[1:]


QWEN25_05B_SHAPE = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                        num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1_000_000.0)


def build_qwen25_05b_shaped(tokenizer_dir: Path, out: Path) -> Path:
    """A random model with Qwen2.5-0.5B's transformer shape and the tiny tokenizer, saved to ``out``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    config = Qwen2Config(vocab_size=((len(tok) + 63) // 64) * 64, tie_word_embeddings=True, bos_token_id=None,
                         eos_token_id=eos, pad_token_id=tok.pad_token_id, **QWEN25_05B_SHAPE)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.generation_config.eos_token_id = [eos, tok.pad_token_id]
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def cuda_bench(args, work: Path, base: list[str], model: Path) -> None:
    import torch

    from awarl.train.config import TrainConfig

    if not torch.cuda.is_available():
        raise SystemExit("--cuda needs a CUDA device")
    gpu = ["grpo.use_cpu=false", "grpo.bf16=true", "model.dtype=bfloat16", "grpo.learning_rate=1e-5"]
    arms = {"tiny bf16": TrainConfig.from_yaml(ROOT / "configs/tiny_cpu.yaml", [*base, *gpu, f"model.path={model}"])}
    big = build_qwen25_05b_shaped(model, work / "qwen25-05b-shaped")
    arms["0.5B-shaped LoRA bf16"] = TrainConfig.from_yaml(
        ROOT / "configs/tiny_cpu.yaml", [*base, *gpu, f"model.path={big}", "model.lora=true", "model.lora_r=16"])
    rows = []
    for name, config in arms.items():
        torch.cuda.reset_peak_memory_stats()
        times = run("awarl", config, args.steps, work / name.replace(" ", "_"))
        rows.append((name, statistics.median(times), torch.cuda.max_memory_allocated() / 2**30))
    print(f"\nGRPO on {torch.cuda.get_device_name()}, {args.batch} rollouts/step, {args.steps - 1} timed steps")
    print(f"{'run':<24}{'median s/step':>15}{'peak GiB':>10}")
    for name, med, mem in rows:
        print(f"{name:<24}{med:>15.3f}{mem:>10.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="model folder (default: the warm-started tiny test model)")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch", type=int, default=16, help="rollouts per step")
    parser.add_argument("--cuda", action="store_true", help="GPU runs instead of the CPU overhead comparison")
    args = parser.parse_args()

    import torch

    from awarl.train.config import TrainConfig

    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        records, corpus, model = prepare(work, args.model)
        overrides = [
            f"model.path={model}", f"data.records={records}", "data.capability=null", f"data.corpus={corpus}",
            "logging.report_to=[none]", f"grpo.max_steps={args.steps}",
            f"grpo.per_device_train_batch_size={args.batch}", "grpo.num_generations=4", "grpo.steps_per_generation=1",
            "grpo.learning_rate=0.0", "grpo.save_strategy=no", "grpo.report_to=[none]",
        ]
        if args.cuda:
            cuda_bench(args, work, [o for o in overrides if not o.startswith(("model.path", "grpo.learning_rate"))],
                       model)
            return
        config = TrainConfig.from_yaml(ROOT / "configs/tiny_cpu.yaml", overrides)
        times: dict[str, list[float]] = {"plain": [], "awarl": []}
        t0 = time.perf_counter()
        for r in range(args.rounds):
            for arm in (("plain", "awarl") if r % 2 == 0 else ("awarl", "plain")):
                times[arm] += run(arm, config, args.steps, work / f"{arm}{r}")
        wall = time.perf_counter() - t0

    med = {arm: statistics.median(v) for arm, v in times.items()}
    mean = {arm: statistics.fmean(v) for arm, v in times.items()}
    print(f"\nGRPO step time, tiny model, {args.batch} rollouts/step, {args.rounds} x {args.steps - 1} timed steps "
          f"per arm ({wall:.0f} s total)")
    print(f"{'arm':<8}{'median s/step':>15}{'mean s/step':>13}{'steps':>7}")
    for arm in ("plain", "awarl"):
        print(f"{arm:<8}{med[arm]:>15.3f}{mean[arm]:>13.3f}{len(times[arm]):>7}")
    ratio = med["awarl"] / med["plain"]
    print(f"ratio awarl/plain (median): {ratio:.3f}  (target <= 1.15: {'met' if ratio <= 1.15 else 'NOT met'})")


if __name__ == "__main__":
    main()
