#!/usr/bin/env bash
# QLoRA against LoRA on SmolLM2-135M-Instruct, through `awarl train` itself: the same SFT steps and the
# same GRPO step with model.quantization nf4 (a bitsandbytes 4-bit base) and without, one process per
# arm, in one run. Needs scripts/smollm2_recipe.sh's model, world and sft stages (runs/smollm2) and the
# `qlora` extra.
#
#   bash scripts/bench_qlora.sh [SFT_STEPS]      # default 2 SFT steps, 1 GRPO step per arm
#
# Prints a table (wall s, CPU s, peak RSS) and the QLoRA / LoRA ratios; writes runs/bench_qlora/.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-2}
RUN=runs/smollm2
OUT=runs/bench_qlora
RECIPE=configs/smollm2_world.yaml
[ -f $RUN/sft/final/config.json ] && [ -f $RUN/capability.jsonl ] || {
  echo "needs runs/smollm2/sft/final and runs/smollm2/capability.jsonl: bash scripts/smollm2_recipe.sh model world sft capability"; exit 2; }
rm -rf $OUT && mkdir -p $OUT
printf 'arm\tstage\twall_s\tcpu_s\tpeak_rss_mb\n' > $OUT/table.tsv

run() {  # run ARM STAGE COMMAND...
  local arm=$1 stage=$2; shift 2
  /usr/bin/time -f "%e %U %S %M" -o $OUT/$arm-$stage.time "$@" > $OUT/$arm-$stage.log 2>&1 || {
    echo "$arm $stage failed:"; tail -20 $OUT/$arm-$stage.log; exit 1; }
  read -r wall user sys rss < $OUT/$arm-$stage.time
  printf '%s\t%s\t%.0f\t%.0f\t%.0f\n' "$arm" "$stage" "$wall" "$(echo "$user + $sys" | bc)" "$((rss / 1024))" >> $OUT/table.tsv
}

for arm in lora qlora; do
  quant=null; [ $arm = qlora ] && quant=nf4
  run $arm sft awarl train sft --config $RECIPE --set model.quantization=$quant \
    --set data.records=$RUN/world/sft_records.jsonl --set sft.args.max_steps=$STEPS --set sft.output_dir=$OUT/$arm-sft
  run $arm grpo awarl train grpo --config $RECIPE --set model.quantization=$quant --set sft.enabled=false \
    --set model.path=$RUN/sft/final --set grpo.max_steps=1 --set output_dir=$OUT/$arm-grpo
done
column -t $OUT/table.tsv
python - <<'EOF'
import csv
rows = {(r["arm"], r["stage"]): r for r in csv.DictReader(open("runs/bench_qlora/table.tsv"), delimiter="\t")}
for stage in ("sft", "grpo"):
    q, l = rows[("qlora", stage)], rows[("lora", stage)]
    print(f"{stage}: QLoRA / LoRA  wall {float(q['wall_s']) / float(l['wall_s']):.2f}x  "
          f"CPU {float(q['cpu_s']) / float(l['cpu_s']):.2f}x  peak memory {float(q['peak_rss_mb']) / float(l['peak_rss_mb']):.2f}x")
EOF
