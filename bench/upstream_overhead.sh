#!/usr/bin/env bash
# What generating through an `upstream` costs: a gateway chatflow (upstream_generate in front of
# one engine chatflow) against the engine alone, with `chatflow bench` on the same requests.
# Reports TTFT p50 added (goal: <= 1 ms), one stream at a time (latency) and at CONCURRENCY
# streams, and output-token throughput through the gateway as a share of the engine's at
# CONCURRENCY (goal: >= 90%), each the median of ROUNDS alternating runs.
# Usage: bench/upstream_overhead.sh        (from the checkout, after building into build/)
#   CHATFLOW_MODEL=model.gguf   the engine's model (default: a random-weight model made here with
#                               `chatflow make-model $MODEL_ARGS`, by default the test suite's tiny
#                               one: the engine is then as fast as its HTTP path, the worst case)
#   ENGINE_THREADS=0            the engine's compute threads (0: its own choice)
#   CONCURRENCY=8 REQUESTS=400 MAX_TOKENS=64 ROUNDS=3
set -euo pipefail
chatflow=$(realpath "${CHATFLOW_BIN:-build/chatflow}")
concurrency=${CONCURRENCY:-8}
requests=${REQUESTS:-400}
max_tokens=${MAX_TOKENS:-64}
rounds=${ROUNDS:-3}
work=$(mktemp -d)
pids=()
trap 'for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; rm -rf "$work"' EXIT

model=${CHATFLOW_MODEL:-}
if [[ -z $model ]]; then
  model=$work/model.gguf
  # shellcheck disable=SC2086
  "$chatflow" make-model ${MODEL_ARGS:---dim 128 --layers 2 --heads 4 --ffn 256 --context 16384} \
    -o "$model" >/dev/null
fi

# Starts `chatflow serve` on a free port (in this shell, so the trap can stop it); sets $url.
serve() {
  "$chatflow" serve --port 0 --access-log off --pipeline "$2" >"$work/out-$1" 2>&1 &
  pids+=($!)
  for _ in $(seq 600); do
    url=$(grep -o 'http://[0-9.:]*' "$work/out-$1" | head -1 || true)
    [[ -n $url ]] && return
    sleep 0.1
  done
  echo "the server did not start:" >&2; cat "$work/out-$1" >&2; exit 1
}

cat >"$work/engine.yaml" <<YAML
version: 1
name: engine
max_in_flight: 1024
resources:
  llm: {type: gguf_model, path: "$model", name: bench-model, threads: ${ENGINE_THREADS:-0}}
stages:
  - {name: tokenize, type: tokenize, config: {model: llm}}
  - {name: prefill, type: prefill, config: {model: llm}}
  - {name: decode, type: decode, config: {model: llm}}
  - {name: detokenize, type: detokenize, config: {model: llm}}
  - {name: emit, type: sse_emit}
YAML
serve engine "$work/engine.yaml"
engine=$url

cat >"$work/gateway.yaml" <<YAML
version: 1
name: gateway
max_in_flight: 1024
resources:
  llm: {type: upstream, endpoints: "$engine", model: bench-model}
stages:
  - {name: generate, type: upstream_generate, config: {model: llm}}
  - {name: emit, type: sse_emit}
YAML
serve gateway "$work/gateway.yaml"
gateway=$url

run() {
  "$chatflow" bench --url "$1/v1" --model bench-model --concurrency "$2" --requests "$3" \
    --max-tokens "$max_tokens" --temperature 0 --json
}

run "$engine" "$concurrency" 100 >/dev/null  # warm-up, both paths
run "$gateway" "$concurrency" 100 >/dev/null
for round in $(seq "$rounds"); do
  run "$engine" 1 200 >"$work/engine-1-$round.json"
  run "$gateway" 1 200 >"$work/gateway-1-$round.json"
  run "$engine" "$concurrency" "$requests" >"$work/engine-$concurrency-$round.json"
  run "$gateway" "$concurrency" "$requests" >"$work/gateway-$concurrency-$round.json"
done

python3 - "$work" "$rounds" "$concurrency" <<'PY'
import json, statistics, sys
work, rounds, concurrency = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def load(kind, streams):
    return [json.load(open(f"{work}/{kind}-{streams}-{r}.json")) for r in range(1, rounds + 1)]
for streams in (1, concurrency):
    engine, gateway = load("engine", streams), load("gateway", streams)
    print(f"{streams} concurrent stream(s):")
    for name, runs in (("engine alone", engine), ("gateway -> engine", gateway)):
        failed = sum(r["failed_requests"] for r in runs)
        print(f"  {name:20s} TTFT p50 {statistics.median(r['ttft']['p50_ms'] for r in runs):8.3f} ms   "
              f"output {statistics.median(r['output_throughput'] for r in runs):9.1f} tok/s   "
              f"requests {statistics.median(r['request_throughput'] for r in runs):7.2f}/s   failed {failed}")
    added = [g["ttft"]["p50_ms"] - e["ttft"]["p50_ms"] for e, g in zip(engine, gateway)]
    ratio = [g["output_throughput"] / e["output_throughput"] for e, g in zip(engine, gateway)]
    print(f"  TTFT p50 added: {statistics.median(added):.3f} ms (goal <= 1 ms); per round: "
          + ", ".join(f"{a:.3f}" for a in added))
    print(f"  throughput through the gateway: {100 * statistics.median(ratio):.1f}% of the engine's "
          "(goal >= 90%); per round: " + ", ".join(f"{100 * r:.1f}%" for r in ratio))
PY
