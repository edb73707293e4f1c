#!/usr/bin/env bash
# The main job on the embedded defaults: the shipped HotpotQA and MuSiQue-Full samples, a tiny
# offline model, CPU. Prepare data -> build the tiny model -> SFT cold start -> capability p_i ->
# AWA-RL GRPO -> evaluate the SFT and the GRPO checkpoints -> report.
# Everything lands in runs/tiny (the paths of configs/tiny_cpu.yaml); rerunning resumes or redoes
# each stage from its inputs. It teaches the machinery, not a good agent: the model is ~1 M params.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
OUT=runs/tiny
RECIPE=configs/tiny_cpu.yaml
step() { printf '\n== %s ==\n' "$*"; }

step "1/7 prepare the shipped samples"
awarl data prepare --dataset hotpotqa --input data/samples/hotpotqa_dev_distractor_sample.json --out "$OUT/data"
awarl data prepare --dataset musique --input data/samples/musique_full_train_sample.jsonl --out "$OUT/musique_full"
awarl data merge "$OUT/data" "$OUT/musique_full" --out "$OUT/eval_data"

step "2/7 build the tiny offline model"
python -m awarl.train.tiny --out "$OUT/model"

step "3/7 SFT cold start (tool results masked from the loss)"
awarl train sft --config "$RECIPE"

step "4/7 capability p_i of the SFT model (K rollouts per question)"
awarl capability estimate --model "$OUT/sft/final" --data "$OUT/data/records.jsonl" --out "$OUT/capability.jsonl" \
    --k 4 --topk 2 --max-turns 2 --max-tokens 256 --device cpu --no-progress

step "5/7 AWA-RL GRPO with the search tool"
awarl train grpo --config "$RECIPE"

step "6/7 evaluate before and after RL (HotpotQA sample + MuSiQue-Full, closed scope)"
for model in sft grpo; do
  awarl eval run --model "$OUT/$model/final" --data "$OUT/eval_data/records.jsonl" --out "$OUT/eval/$model" \
      --topk 2 --max-turns 2 --max-tokens 256 --device cpu --no-progress
done

step "7/7 report"
awarl eval report "$OUT"/eval/* --out "$OUT/report"
cat "$OUT/report/report.md"
