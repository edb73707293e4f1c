#!/usr/bin/env bash
# The README's first command: AWA-RL end to end on the synthetic world, on this machine's CPU.
# World -> tiny offline model -> SFT warm start -> p_i -> GRPO with the AWA reward -> held-out
# evaluation before and after RL -> runs/demo/report/report.md (rerunning resumes).
# Pass --quick for the short version; any other `awarl demo` option is passed through.
# The path to real data (HotpotQA, MuSiQue, 2Wiki) is the per-stage pipeline in the README.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
awarl demo "$@"
