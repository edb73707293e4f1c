#!/usr/bin/env bash
# Multi-node AWA-RL GRPO: run this script once on every node (same arguments, its own rank).
#
#   MACHINE_RANK=0 MAIN_ADDRESS=10.0.0.1 NUM_MACHINES=2 scripts/launch_multinode.sh \
#       --config configs/qwen2.5-7b_8gpu.yaml --index runs/hm/index [--set reward.gamma=0.3 ...]
#
# Each node starts its own retrieval server on 127.0.0.1 (so rollouts never search over the
# network), waits for it, then joins the accelerate launch. Under SLURM the rank, the main
# address and the node count are read from SLURM_NODEID / SLURM_JOB_NODELIST / SLURM_NNODES.
#
# Environment (all optional except where SLURM does not provide them):
#   MACHINE_RANK       this node's rank, 0 .. NUM_MACHINES-1
#   MAIN_ADDRESS       address of rank 0 (reachable from every node)
#   MAIN_PORT          rendezvous port on rank 0 (default 29500)
#   NUM_MACHINES       number of nodes
#   GPUS_PER_NODE      default: number of GPUs nvidia-smi lists
#   ACCELERATE_CONFIG  default: configs/accelerate/zero2.yaml
#   SEARCH_PORT        port of the node-local retrieval server (default 8010)
set -euo pipefail

CONFIG=""
INDEX=""
EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --config) CONFIG="$2"; shift 2 ;;
    --index) INDEX="$2"; shift 2 ;;
    *) EXTRA+=("$1"); shift ;;
  esac
done
if [[ -z "$CONFIG" || -z "$INDEX" ]]; then
  echo "usage: $0 --config RECIPE.yaml --index INDEX_DIR [--set key=value ...] [--resume latest]" >&2
  exit 2
fi

MACHINE_RANK="${MACHINE_RANK:-${SLURM_NODEID:-}}"
NUM_MACHINES="${NUM_MACHINES:-${SLURM_NNODES:-}}"
if [[ -z "${MAIN_ADDRESS:-}" && -n "${SLURM_JOB_NODELIST:-}" ]]; then
  MAIN_ADDRESS="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"
fi
for var in MACHINE_RANK MAIN_ADDRESS NUM_MACHINES; do
  if [[ -z "${!var:-}" ]]; then
    echo "error: set $var (or run under SLURM)" >&2
    exit 2
  fi
done
MAIN_PORT="${MAIN_PORT:-29500}"
GPUS_PER_NODE="${GPUS_PER_NODE:-$(nvidia-smi --list-gpus | wc -l)}"
ACCELERATE_CONFIG="${ACCELERATE_CONFIG:-configs/accelerate/zero2.yaml}"
SEARCH_PORT="${SEARCH_PORT:-8010}"
LOG_DIR="${LOG_DIR:-runs/logs}"
mkdir -p "$LOG_DIR"

# 1. The node-local retrieval server.
awarl search serve --index "$INDEX" --host 127.0.0.1 --port "$SEARCH_PORT" \
  >"$LOG_DIR/search_node${MACHINE_RANK}.log" 2>&1 &
SEARCH_PID=$!
trap 'kill "$SEARCH_PID" 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  if curl -fsS --max-time 2 "http://127.0.0.1:${SEARCH_PORT}/health" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$SEARCH_PID" 2>/dev/null; then
    echo "error: the retrieval server exited; see $LOG_DIR/search_node${MACHINE_RANK}.log" >&2
    exit 1
  fi
  sleep 1
done
curl -fsS --max-time 2 "http://127.0.0.1:${SEARCH_PORT}/health" >/dev/null \
  || { echo "error: retrieval server not ready after 120 s" >&2; exit 1; }

# 2. Training: one process per GPU on every node; rank 0 hosts the rendezvous.
accelerate launch \
  --config_file "$ACCELERATE_CONFIG" \
  --num_machines "$NUM_MACHINES" \
  --machine_rank "$MACHINE_RANK" \
  --main_process_ip "$MAIN_ADDRESS" \
  --main_process_port "$MAIN_PORT" \
  --num_processes "$((NUM_MACHINES * GPUS_PER_NODE))" \
  -m awarl.cli train grpo --config "$CONFIG" \
  --set "data.retriever_url=http://127.0.0.1:${SEARCH_PORT}" \
  "${EXTRA[@]}"
