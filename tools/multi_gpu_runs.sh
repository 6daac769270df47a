#!/usr/bin/env bash
# The tensor-parallel reports' runs, one phase per call (each phase stays
# under ten minutes on a machine of 2 or 4 GPUs; the checkpoints of `models`
# stay in WORK for the later phases):
#
#   tools/multi_gpu_runs.sh PHASE [TP]
#     tests    the CUDA tests, tp equality and the communicators across GPUs
#     models   random InternLM2.5-7B- and 20B-shaped checkpoints into WORK
#     serve    SHAPE served at --tp TP (default 2) with the reports' flags:
#              custom all-reduce, NCCL forced, no peer access
#              (NCCL_P2P_DISABLE=1 TESSERA_PEER_ACCESS=0), and the memory
#              squeeze (--cache-max-entry-count 0.99); each answers the
#              reports' chat request and 64 concurrent streams, then SIGTERM
#     nodes    --nnodes 2 over loopback, one GPU a node
#     bench    batch-1 time per token (one stream) and 64 streams at tp 1..TP,
#              all-reduce latency per communicator
#
# Environment: TESSERA (binary, default build/tessera), CUDA_TESTS
# (build/tests/cuda_tests), TOKENIZER (a folder with InternLM2's
# tokenizer.model), WORK (/tmp/tessera-tp), SHAPE (internlm2_5-7b; also
# internlm2_5-20b, or demo with DEVICE=cpu for a smoke run on the CPU),
# DEVICE (cuda). Every step is bounded by a timeout and says what it found;
# the script never stops at a failed step.
set -u
phase=${1:?"phase: tests, models, serve, nodes or bench"}
tp=${2:-2}
tessera=${TESSERA:-build/tessera}
cuda_tests=${CUDA_TESTS:-build/tests/cuda_tests}
tokenizer=${TOKENIZER:-}
work=${WORK:-/tmp/tessera-tp}
shape=${SHAPE:-internlm2_5-7b}
device=${DEVICE:-cuda}
port=23333
mkdir -p "$work"

model_dir() { echo "$work/$1"; }

# The reports' chat request; prints its finish reason, usage and first characters.
cat > "$work/chat.py" <<'PY'
import json, sys, urllib.request
base = sys.argv[1]
model = json.load(urllib.request.urlopen(base + "/v1/models", timeout=30))["data"][0]["id"]
body = {"model": model, "temperature": 0.7, "top_p": 0.8, "max_tokens": 40,
        "messages": [{"role": "system", "content": "You are a helpful assistant."},
                     {"role": "user", "content": "讲一个三国故事"}]}
request = urllib.request.Request(base + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
answer = json.load(urllib.request.urlopen(request, timeout=300))
print("chat request:", answer["choices"][0]["finish_reason"], answer["usage"],
      repr(answer["choices"][0]["message"]["content"][:40]))
PY

# serve LABEL ENV... -- ARGS...: starts a server, waits for /health (5 min),
# sends the chat request and 64 streams, stops it with SIGTERM and reports
# the communicator it logged, its exit status and any abort in its log.
serve() {
  local label=$1
  shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local log="$work/serve-$label.log"
  echo "== $label: ${envs[*]} tessera serve api_server $*"
  env ${envs[@]+"${envs[@]}"} "$tessera" serve api_server "$@" --server-port $port > "$log" 2>&1 &
  local pid=$!
  local up=0
  for _ in $(seq 1 300); do
    if curl -sf "http://127.0.0.1:$port/health" > /dev/null; then up=1; break; fi
    kill -0 $pid 2> /dev/null || break
    sleep 1
  done
  grep -E "communicator|KV cache|workspace measured|error|out of memory" "$log" | cut -c1-240 | head -8
  if [ $up = 1 ]; then
    timeout 300 python3 "$work/chat.py" "http://127.0.0.1:$port" || echo "chat request: FAILED"
    timeout 300 "$tessera" bench serve --url "http://127.0.0.1:$port" --concurrency 64 --requests 64 \
      --prompt-tokens 128 --output-tokens 64 2>&1 | grep -E "failures|output tokens/s|TTFT|TPOT"
    kill -TERM $pid
  else
    echo "server did not come up"
  fi
  wait $pid
  echo "server exit status $?; abort/terminate/assertion lines: $(grep -ciE 'abort|terminate called|assertion' "$log")"
}

case "$phase" in
  tests)
    nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
    nvidia-smi topo -m 2> /dev/null | head -8
    "$tessera" check_env 2>&1 | sed -n '/peer access/,$p'
    TESSERA_PEER_ACCESS=0 "$tessera" check_env 2>&1 | grep -A4 "tessera would use"
    timeout 500 "$cuda_tests" --gtest_filter='*Tp*:*Comm*:*Nccl*:*AllReduce*' 2>&1 |
      grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure" | head -30
    ;;
  models)
    [ -n "$tokenizer" ] || { echo "set TOKENIZER to a folder with InternLM2's tokenizer.model"; exit 2; }
    timeout 300 "$tessera" convert random_model --shape internlm2_5-7b --tokenizer-from "$tokenizer" \
      --eos-ids 2 92542 "$(model_dir internlm2_5-7b)" 2>&1 | tail -1
    timeout 500 "$tessera" convert random_model --shape internlm2_5-20b --tokenizer-from "$tokenizer" \
      --rope-theta 5e7 --dynamic-ntk-factor 2.5 --eos-ids 2 92542 "$(model_dir internlm2_5-20b)" 2>&1 | tail -1
    du -sh "$work"/*
    ;;
  serve)
    m=$(model_dir "$shape")
    if [ "$shape" = demo ] && [ ! -d "$m" ]; then "$tessera" convert random_model --shape demo "$m" > /dev/null 2>&1; fi
    flags=(--tp "$tp" --max-batch-size 64 --device "$device")
    [ "$shape" = demo ] || flags+=(--chat-template internlm2)
    serve "tp$tp-custom" -- "$m" "${flags[@]}" --cache-max-entry-count 0.8
    serve "tp$tp-nccl" -- "$m" "${flags[@]}" --cache-max-entry-count 0.8 --disable-custom-all-reduce
    serve "tp$tp-no-peer-access" NCCL_P2P_DISABLE=1 TESSERA_PEER_ACCESS=0 -- "$m" "${flags[@]}" \
      --cache-max-entry-count 0.8
    serve "tp$tp-squeeze" -- "$m" "${flags[@]}" --cache-max-entry-count 0.99
    ;;
  nodes)
    m=$(model_dir "$shape")
    common=(--tp 2 --nnodes 2 --master-addr 127.0.0.1 --master-port 29555 --cache-max-entry-count 0.8
            --max-batch-size 64 --device "$device")
    [ "$shape" = demo ] || common+=(--chat-template internlm2)
    CUDA_VISIBLE_DEVICES=1 "$tessera" serve api_server "$m" "${common[@]}" --node-rank 1 \
      > "$work/node1.log" 2>&1 &
    node1=$!
    serve "nnodes2" CUDA_VISIBLE_DEVICES=0 -- "$m" "${common[@]}" --node-rank 0
    wait $node1
    echo "node 1 exit status $?; its last lines:"
    tail -3 "$work/node1.log" | cut -c1-240
    ;;
  bench)
    m=$(model_dir "$shape")
    for n in $(seq 1 "$tp"); do
      [ $((tp % n)) = 0 ] || continue
      log="$work/bench-tp$n.log"
      "$tessera" serve api_server "$m" --tp "$n" --device "$device" --chat-template internlm2 --max-batch-size 64 \
        --server-port $port > "$log" 2>&1 &
      pid=$!
      for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$port/health" > /dev/null && break; sleep 1; done
      echo "== tp $n: one stream (TPOT = batch-1 time per token), then 64"
      "$tessera" bench serve --url "http://127.0.0.1:$port" --concurrency 1 --requests 4 --prompt-tokens 128 \
        --output-tokens 128 2>&1 | grep -E "TPOT"
      "$tessera" bench serve --url "http://127.0.0.1:$port" --concurrency 64 --requests 128 --prompt-tokens 128 \
        --output-tokens 128 2>&1 | grep -E "failures|output tokens/s"
      kill -TERM $pid
      wait $pid
    done
    timeout 300 "$tessera" bench allreduce --tp "$tp" --max-bytes 67108864 --iterations 20 2>&1 | tail -14
    ;;
  *)
    echo "unknown phase $phase: tests, models, serve, nodes or bench" >&2
    exit 2
    ;;
esac
