#!/usr/bin/env bash
# The L2 warming of decode steps (docs/ARCHITECTURE.md, "L2 warming") on and
# off, alternating in one command so every row of a comparison comes from one
# machine at one time:
#
#   tools/bench_l2_prefetch.sh [BUILD_DIR] [SHAPE] [CONFIG ...]
#
# Each CONFIG is ATTENTION:CHAIN, the values of TESSERA_L2_PREFETCH_MB (the
# weights after decode attention, warmed while it runs) and
# TESSERA_L2_PREFETCH_CHAIN_MB (each product's successor's weight, warmed as
# the product ends): 0 (none), auto (three quarters of the L2) or a number of
# MB. The configurations run in the order given, then again in reverse, each
# a batch-1 decode of 16-bit and AWQ 4-bit random weights of SHAPE
# (internlm2_5-7b by default); BATCH="1 16 64" adds batch sizes.
set -uo pipefail
build=${1:-build}
shape=${2:-internlm2_5-7b}
shift $(( $# < 2 ? $# : 2 ))
configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(0:0 auto:0 0:auto auto:auto)
batch=${BATCH:-1}
tessera="$build/tessera"
[ -x "$tessera" ] || { echo "bench_l2_prefetch.sh: no $tessera (give the build folder)" >&2; exit 2; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

run() {
  local attention=${1%%:*} chain=${1##*:}
  echo "== TESSERA_L2_PREFETCH_MB=$attention TESSERA_L2_PREFETCH_CHAIN_MB=$chain"
  # shellcheck disable=SC2086 # the batch sizes are separate arguments
  TESSERA_L2_PREFETCH_MB=$attention TESSERA_L2_PREFETCH_CHAIN_MB=$chain \
    "$tessera" bench decode --random "$shape" --device cuda --quant none awq --batch $batch \
    --prompt-tokens 128 --decode-tokens 128 2>&1 | grep -E "^(none|awq|copy)"
}
for c in "${configs[@]}"; do run "$c"; done
for (( i = ${#configs[@]} - 1; i >= 0; --i )); do run "${configs[i]}"; done
