#!/usr/bin/env bash
# The GPU checks and benchmarks of docs/BENCHMARKS.md in one command, so that
# every ratio in a run is measured on one machine at one time:
#   tools/bench_gpu.sh [BUILD_DIR] [BASELINE_SCRIPT]
# BUILD_DIR holds tessera and tests/cuda_tests (default: build); with
# BASELINE_SCRIPT (a Hugging Face transformers script such as hf_eager.py), it
# runs last, on the same GPU. Each part's output is printed as it comes; a
# failing part does not stop the others. PARTS=core keeps the headline
# figures only (7B decode and prefill, 20B decode, 256 and 64 streams, 16-bit
# against 4-bit at 1, 16 and 64 rows, the baseline), for a machine held for a
# few minutes; the whole set takes much longer.
set -uo pipefail
build=${1:-build}
baseline=${2:-}
parts=${PARTS:-all}
[ "$parts" = all ] || [ "$parts" = core ] || { echo "bench_gpu.sh: PARTS is all or core, not $parts" >&2; exit 2; }
# all_parts: true unless PARTS=core.
all_parts() { [ "$parts" = all ]; }
tessera="$build/tessera"
[ -x "$tessera" ] || { echo "bench_gpu.sh: no $tessera (give the build folder)" >&2; exit 2; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

section() { printf '\n== %s\n' "$*"; }
if all_parts && [ -x "$build/tests/cuda_tests" ]; then
  section "GPU tests"
  "$build/tests/cuda_tests" --gtest_brief=1 2>&1 | grep -v " INFO " | tail -20
fi
section "7B shape: batch-1 decode, 4,096-token prefill"
"$tessera" bench decode --random internlm2_5-7b --device cuda --prompt-tokens 128 --decode-tokens 256 --prefill-tokens 4096
if all_parts; then
  section "7B shape: batch-1 decode without CUDA graphs"
  TESSERA_CUDA_GRAPHS=0 "$tessera" bench decode --random internlm2_5-7b --device cuda --prompt-tokens 128 --decode-tokens 128
fi
section "20B shape: batch-1 decode"
"$tessera" bench decode --random internlm2_5-20b --device cuda --prompt-tokens 128 --decode-tokens 128
for batch in 256 64; do
  section "7B shape: $batch streams through the engine"
  "$tessera" bench engine --random internlm2_5-7b --device cuda --batch "$batch" --prompt-tokens 128 --new-tokens 128 --skip-single
done
if all_parts; then
  section "7B shape: 16-bit and AWQ 4-bit decode at batch 1, 16, 64, 128, 256"
  "$tessera" bench decode --random internlm2_5-7b --device cuda --quant none awq --batch 1 16 64 128 256
else
  section "7B shape: 16-bit and AWQ 4-bit decode at batch 1, 16, 64"
  "$tessera" bench decode --random internlm2_5-7b --device cuda --quant none awq --batch 1 16 64
fi
all_parts || { [ -n "$baseline" ] && section "baseline: $baseline" && PYTHONUNBUFFERED=1 python3 "$baseline"; exit 0; }
section "prefill attention: the scalar, tensor-core and FlashInfer kernels"
"$tessera" bench attention --tokens 1024,2048,4096,8192
section "7B shape: 4,096-token prefill without FlashInfer's kernel"
TESSERA_SM90_PREFILL=0 "$tessera" bench decode --random internlm2_5-7b --device cuda --prompt-tokens 128 --decode-tokens 16 --prefill-tokens 4096
section "7B shape: the ops of one decode step"
"$tessera" bench ops --random internlm2_5-7b --device cuda
section "7B shape: the ops of a 4-bit decode step (with each 4-bit shape's candidate timings)"
"$tessera" --log-level DEBUG bench ops --random internlm2_5-7b --device cuda --awq-group-size 128 --batch 1 2>&1 |
  grep -v "linear m="
if [ -n "$baseline" ]; then
  section "baseline: $baseline"
  PYTHONUNBUFFERED=1 python3 "$baseline"
fi
