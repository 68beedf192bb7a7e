#!/usr/bin/env bash
# chatflow serve against llama.cpp's llama-server on the same GGUF file, side by side:
#   bench/compare_llama_server.sh MODEL.gguf LLAMA_CPP_BIN [ROUNDS] [THREADS]
# Each round starts `chatflow serve --pipeline graphs/minimal.yaml`, then `llama-server -t THREADS
# -np 8 -c 8192`, and measures each with `chatflow bench --endpoint completions --concurrency 8
# --max-tokens 64 --requests 40 --temperature 0` (8 streaming clients, closed loop). Prints the
# completions/s and time-to-first-token lines of every run.
set -euo pipefail
model=${1:?usage: bench/compare_llama_server.sh MODEL.gguf LLAMA_CPP_BIN [ROUNDS] [THREADS]}
llama_bin=${2:?usage: bench/compare_llama_server.sh MODEL.gguf LLAMA_CPP_BIN [ROUNDS] [THREADS]}
rounds=${3:-2}
threads=${4:-$(nproc)}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
chatflow=${CHATFLOW_BIN:-$repo/build/chatflow}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

wait_healthy() {
  for _ in $(seq 1 240); do
    curl -sf "http://127.0.0.1:$1/health" >/dev/null && return 0
    sleep 0.5
  done
  echo "no server on port $1 (see $work)" >&2
  exit 1
}

measure() {  # PORT LABEL
  "$chatflow" bench --url "http://127.0.0.1:$1" --endpoint completions --concurrency 8 \
    --max-tokens 64 --requests 40 --temperature 0 >"$work/bench.txt" 2>&1
  echo "== $2"
  grep -E "Successful|Failed:|Request throughput|Time to first token" -A1 "$work/bench.txt" |
    grep -vE "^--$|Time per output"
}

for round in $(seq 1 "$rounds"); do
  CHATFLOW_MODEL=$model "$chatflow" serve --pipeline "$repo/graphs/minimal.yaml" --port 18611 \
    --access-log off >"$work/chatflow.log" 2>&1 &
  pid=$!
  wait_healthy 18611
  measure 18611 "round $round: chatflow serve"
  kill -INT "$pid"
  { wait "$pid"; } 2>/dev/null || true
  "$llama_bin/llama-server" -m "$model" -t "$threads" -np 8 -c 8192 --port 18612 \
    >"$work/llama.log" 2>&1 &
  pid=$!
  wait_healthy 18612
  measure 18612 "round $round: llama-server"
  kill -INT "$pid"
  { wait "$pid"; } 2>/dev/null || true
done
