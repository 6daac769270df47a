#!/usr/bin/env bash
# Batch-1 decode of several tessera binaries (builds of different commits),
# alternating in one command so every row of a comparison comes from one
# machine at one time:
#
#   tools/bench_binaries.sh SHAPE BINARY ...
#
# Each binary runs the decode table (16-bit and AWQ 4-bit random weights of
# SHAPE, e.g. internlm2_5-7b) and the single-stream decode line (`bench
# decode` without --quant: generate's tokens/s and the fraction of the
# bandwidth limit), in the order given, then again in reverse. BATCH="1 16
# 64" adds batch sizes to the table.
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: tools/bench_binaries.sh SHAPE BINARY ..." >&2; exit 2; }
shape=$1
shift
binaries=("$@")
batch=${BATCH:-1}
for b in "${binaries[@]}"; do
  [ -x "$b" ] || { echo "bench_binaries.sh: $b is not an executable" >&2; exit 2; }
done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

run() {
  echo "== $1"
  # shellcheck disable=SC2086 # the batch sizes are separate arguments
  "$1" bench decode --random "$shape" --device cuda --quant none awq --batch $batch --prompt-tokens 128 \
    --decode-tokens 128 2>&1 | grep -E "^(weights|none|awq|copy)"
  "$1" bench decode --random "$shape" --device cuda --prompt-tokens 128 --decode-tokens 256 2>&1 |
    grep -E "^(decode|of the limit)"
}
for b in "${binaries[@]}"; do run "$b"; done
for (( i = ${#binaries[@]} - 1; i >= 0; --i )); do run "${binaries[i]}"; done
