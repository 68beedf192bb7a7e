#!/usr/bin/env bash
# Time to the first token of a long shared system prompt after a restart, with the prefix cache
# kept across restarts (gguf_model kv_cache.persist) and without it: the case a fleet meets after
# every deploy. One server at a time on loopback, non-streaming requests of one token (their whole
# time is the time to the first token), a different question each time after the same system
# prompt.
#   bench/prefix_cache_restart.sh MODEL.gguf [SYSTEM_PROMPT_WORDS=1500] [THREADS=2]
set -euo pipefail
model=${1:?usage: bench/prefix_cache_restart.sh MODEL.gguf [words] [threads]}
words=${2:-1500}
threads=${3:-2}
chatflow=${CHATFLOW_BIN:-$(dirname "$0")/../build/chatflow}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
port=$((20000 + RANDOM % 20000))

system=$(python3 -c "
import random
random.seed(7)
vocab = 'the a of to and in is was for on that with as by at from this be are or an it not which have one all their there were has been more other some would what about when out into them than its only also time new two may after first most made over these such like'.split()
print(' '.join(random.choice(vocab) for _ in range($words)))")

pipeline() {  # $1: persist path or empty
  local persist=""
  [[ -n "$1" ]] && persist=", kv_cache: {persist: {path: \"$1\"}}"
  cat > "$work/pipeline.yaml" <<YAML
version: 1
resources:
  llm: {type: gguf_model, path: "$model", name: bench, threads: $threads$persist}
stages:
  - {name: tokenize, type: tokenize, config: {model: llm}}
  - {name: prefill, type: prefill, config: {model: llm}}
  - {name: decode, type: decode, config: {model: llm}}
  - {name: detokenize, type: detokenize, config: {model: llm}}
  - {name: emit, type: sse_emit}
YAML
}

start() {
  "$chatflow" serve --pipeline "$work/pipeline.yaml" --port "$port" > "$work/serve.log" 2>&1 &
  server=$!
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$port/health" > /dev/null && return
    sleep 0.2
  done
  echo "the server did not start:"; cat "$work/serve.log"; exit 1
}

stop() { kill -TERM "$server"; wait "$server" || true; }

# Seconds to the whole one-token answer, and the prompt tokens the prefix cache held.
ask() {
  python3 - "$port" "$1" "$work/system.txt" <<'PY'
import json, sys, time, urllib.request
port, question, system_file = sys.argv[1], sys.argv[2], sys.argv[3]
body = json.dumps({"model": "bench", "max_tokens": 1, "temperature": 0, "messages": [
    {"role": "system", "content": open(system_file).read()},
    {"role": "user", "content": question}]}).encode()
request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", body,
                                 {"Content-Type": "application/json"})
started = time.perf_counter()
answer = json.load(urllib.request.urlopen(request, timeout=600))
elapsed = time.perf_counter() - started
usage = answer["usage"]
print(f"{elapsed * 1000:9.1f} ms  prompt {usage['prompt_tokens']} tokens, "
      f"{usage.get('prompt_tokens_details', {}).get('cached_tokens', 0)} from the prefix cache")
PY
}

printf '%s' "$system" > "$work/system.txt"
echo "model $model, $threads threads, a system prompt of $words words; $(date -u)"
pipeline "$work/prefix.kv"
start
echo -n "first start, cold:                       "; ask "What is the first word?"
echo -n "same server, warm:                       "; ask "What is the second word?"
stop
grep -o "saved [0-9]* blocks[^']*" "$work/serve.log" || true
start
grep -o "restored [0-9]* blocks[^']*" "$work/serve.log" || true
echo -n "after a restart, restored from the file: "; ask "What is the third word?"
stop
pipeline ""
start
echo -n "after a restart without persist, cold:   "; ask "What is the fourth word?"
stop
