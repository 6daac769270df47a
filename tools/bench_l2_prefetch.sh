#!/usr/bin/env bash
# The L2 warming across decode attention (docs/ARCHITECTURE.md, "L2
# warming") at several budgets, alternating in one command so every row of
# a comparison comes from one machine at one time:
#
#   tools/bench_l2_prefetch.sh [BUILD_DIR] [SHAPE] [BUDGET ...]
#
# Each BUDGET is a value of TESSERA_L2_PREFETCH_MB: 0 (none), auto (three
# quarters of the L2) or a number of MB (default: 0 auto 16). The budgets
# run in the order given, then again in reverse, each a batch-1 decode of
# 16-bit and AWQ 4-bit random weights of SHAPE (internlm2_5-7b by default);
# BATCH="1 16 64" adds batch sizes.
set -uo pipefail
build=${1:-build}
shape=${2:-internlm2_5-7b}
shift $(( $# < 2 ? $# : 2 ))
budgets=("$@")
[ ${#budgets[@]} -gt 0 ] || budgets=(0 auto 16)
batch=${BATCH:-1}
tessera="$build/tessera"
[ -x "$tessera" ] || { echo "bench_l2_prefetch.sh: no $tessera (give the build folder)" >&2; exit 2; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

run() {
  echo "== TESSERA_L2_PREFETCH_MB=$1"
  # shellcheck disable=SC2086 # the batch sizes are separate arguments
  TESSERA_L2_PREFETCH_MB=$1 "$tessera" bench decode --random "$shape" --device cuda --quant none awq \
    --batch $batch --prompt-tokens 128 --decode-tokens 128 2>&1 | grep -E "^(none|awq|copy)"
}
for b in "${budgets[@]}"; do run "$b"; done
for (( i = ${#budgets[@]} - 1; i >= 0; --i )); do run "${budgets[i]}"; done
