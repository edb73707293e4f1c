#!/usr/bin/env bash
# The project's GPU check: one script, at most 10 minutes on one CUDA GPU, each issue's part in it.
#
#   bash scripts/gpu_check.sh            # results (logs, tables, timings) go to $OUT (default runs/gpu_check)
#
#   1. Training on CUDA in bf16 (the world v2 demo and the controller): `awarl demo --quick` with SFT, p_i,
#      GRPO and the evaluation on the GPU, plus a third arm with adaptive p_i (a forced-answer probe of 32
#      questions x 4 every 3 generation batches: 2 probe rounds); its stage times, per-step times and probe
#      rounds (steps.txt) sit beside the CPU ones of docs/benchmarks.md.
#   2. The chatbot's generation on CUDA in bf16 (the chat's default product): `scripts/bench_chat.py --agent`
#      with that demo's agent, 50 threads at once, one generation at a time against batched (chat.log).
#
# Python packages the GPU machine lacks (trl, datasets, bm25s, z3-solver, fastapi, ...) travel as wheels
# in .whl/ when it exists (docs/benchmarks.md, "GPU check", says which); they install to a private folder.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/gpu_check}
WORK=${WORK:-/tmp/awarl-gpu-check}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
rm -rf "$WORK" && mkdir -p "$WORK"
if ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" .whl/*.whl || exit 1
  export PYTHONPATH="$WORK/site:$PWD"
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false TRL_EXPERIMENTAL_SILENCE=1
export JAX_PLATFORMS=${JAX_PLATFORMS:-cpu}  # bm25s imports jax when it is there; its CUDA plugin must not claim the GPU

$PY - <<'EOF' 2>&1 | tee "$OUT/gpu.txt"
import platform, torch, transformers, trl
if not torch.cuda.is_available():
    raise SystemExit("no CUDA device: this check needs a GPU")
print(f"{torch.cuda.get_device_name(0)}, bf16 {torch.cuda.is_bf16_supported()}; torch {torch.__version__} (CUDA "
      f"{torch.version.cuda}), transformers {transformers.__version__}, trl {trl.__version__}; Python {platform.python_version()}")
EOF
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 2

# 1. The quick demo with every stage on the GPU in bf16.
t0=$(date +%s)
timeout "${DEMO_TIMEOUT:-420}" $PY -m awarl.cli demo --quick --out "$WORK/demo" --no-progress \
  --set sft.args.use_cpu=false --set sft.args.bf16=true --set grpo.use_cpu=false --set grpo.bf16=true \
  --set capability.device=cuda \
  --set 'arms.adaptive={"reward": {"kind": "awa", "adaptive_p": true, "adaptive_p_every": 3, "adaptive_p_questions": 32}}' 2>&1 | tee "$OUT/demo.log"
echo "demo rc=${PIPESTATUS[0]} wall=$(( $(date +%s) - t0 )) s" | tee -a "$OUT/demo.log"
cp "$WORK/demo/timings.json" "$WORK/demo/metrics.json" "$OUT/" 2>/dev/null
cp "$WORK/demo/report/report.md" "$OUT/demo_report.md" 2>/dev/null
$PY - "$WORK/demo" <<'EOF' 2>&1 | tee "$OUT/steps.txt"
import json, sys
from pathlib import Path
demo = Path(sys.argv[1])
t = json.loads((demo / "timings.json").read_text())
r = json.loads((demo / "recipe.json").read_text())  # the settings the demo ran with, as dotted keys
print(f"stage seconds: {t}")
sft_steps = r["sft.args.max_steps"]
print(f"SFT: {t['sft'] / sft_steps:.3f} s per step ({sft_steps} steps of {r['sft.args.per_device_train_batch_size']} conversations)")
n = sum(1 for s in ("rl", "eval") for _ in open(demo / "data" / s / "records.jsonl"))
k = r["capability.k"]
print(f"p_i: {t['p_i']:.1f} s for {n} questions x K={k}, {t['p_i'] / (n * k) * 1000:.1f} ms per rollout")
g = next(v for key, v in t.items() if key.startswith("grpo"))
arms = sorted({key.split(".")[1] for key in r if key.startswith("arms.")})
print(f"GRPO: {g / r['grpo.max_steps']:.3f} s per optimizer step, {len(arms)} arms at once ({', '.join(arms)}; "
      f"{r['grpo.max_steps']} steps each, {r['grpo.per_device_train_batch_size']} rollouts per step)")
probe = demo / "grpo" / "adaptive" / "adaptive_p.jsonl"
rounds = [json.loads(line) for line in probe.read_text().splitlines() if line.strip()] if probe.exists() else []
for row in rounds:
    print(f"probe round {row['round']} (after step {row['step']}): {row['seconds']:.2f} s for {row['rollouts']} forced-answer "
          f"rollouts ({row['seconds'] / max(row['rollouts'], 1) * 1000:.1f} ms each), {len(row['raised'])} p_i raised")
if not rounds:
    print(f"no probe round logged ({probe} missing)")
EOF

# 2. The chatbot's generation with the demo's agent, one at a time against batched.
if [ -f "$WORK/demo/demo.json" ]; then
  timeout "${CHAT_TIMEOUT:-150}" $PY scripts/bench_chat.py --agent --demo "$WORK/demo" --device cuda --agent-threads 50 \
    2>&1 | grep -v "Warning\|warn(" | tee "$OUT/chat.log"
  echo "bench_chat rc=${PIPESTATUS[0]}" | tee -a "$OUT/chat.log"
else
  echo "no demo folder: the chat check did not run" | tee "$OUT/chat.log"
fi
