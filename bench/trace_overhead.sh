#!/usr/bin/env bash
# Throughput with tracing on (every request sampled, exported to a local OTLP/HTTP receiver) vs
# off, on the same pipeline and load: `chatflow bench` closed-loop clients against `chatflow
# serve`, alternating off/on for ROUNDS rounds, the median of each side reported.
# The goal (issue 20): on >= 95% of off.
#   PIPELINE   the pipeline YAML (default: echo + sse_emit, where the server's own cost is the
#              whole request and tracing's share is largest; graphs/minimal.yaml runs the model)
#   MODEL      the model id to ask for (default: the first the server lists)
#   SAMPLING   server.tracing.sampling_ratio of the "on" side (default 1.0: every request)
#   CONCURRENCY, DURATION (s), ROUNDS, MAX_TOKENS
# Usage: bench/trace_overhead.sh   (from the checkout, after building into build/; needs node)
set -euo pipefail
chatflow=$(realpath "${CHATFLOW_BIN:-build/chatflow}")
concurrency=${CONCURRENCY:-16}
duration=${DURATION:-10}
rounds=${ROUNDS:-3}
max_tokens=${MAX_TOKENS:-16}
sampling=${SAMPLING:-1.0}
work=$(mktemp -d)
server=
receiver=
trap '[[ -n $server ]] && kill $server 2>/dev/null; [[ -n $receiver ]] && kill $receiver 2>/dev/null; rm -rf "$work"' EXIT

if [[ -z ${PIPELINE:-} ]]; then
  PIPELINE=$work/echo.yaml
  printf 'version: 1\nname: bench-trace\nstages:\n  - {name: echo, type: echo}\n  - {name: emit, type: sse_emit}\n' >"$PIPELINE"
fi
PIPELINE=$(realpath "$PIPELINE")

# A collector stand-in: reads each export and answers 200, as a local collector would.
node -e '
  const server = require("http").createServer((request, response) => {
    request.on("data", () => {});
    request.on("end", () => { response.setHeader("Content-Type", "application/x-protobuf"); response.end(); });
  });
  server.listen(0, "127.0.0.1", () => console.log(server.address().port));
' >"$work/receiver.port" &
receiver=$!
for _ in $(seq 100); do [[ -s $work/receiver.port ]] && break; sleep 0.1; done
collector="http://127.0.0.1:$(cat "$work/receiver.port")/v1/traces"

printf 'server:\n  port: 0\n  access_log: off\npipeline: %s\n' "$PIPELINE" >"$work/off.yaml"
printf 'server:\n  port: 0\n  access_log: off\n  tracing: {endpoint: "%s", sampling_ratio: %s}\npipeline: %s\n' \
  "$collector" "$sampling" "$PIPELINE" >"$work/on.yaml"

serve() {
  "$chatflow" serve --config "$work/$1.yaml" >"$work/out-$1" 2>&1 &
  server=$!
  for _ in $(seq 600); do
    # The line naming the server's own address (the tracing line before it names the collector).
    url=$(grep -o 'at http://[0-9.:]*' "$work/out-$1" | head -1 | cut -c4- || true)
    [[ -n $url ]] && return
    sleep 0.1
  done
  echo "the server did not start:" >&2; cat "$work/out-$1" >&2; exit 1
}
stop() { kill "$server"; wait "$server" || true; server=; }

declare -A rates
for round in $(seq "$rounds"); do
  for mode in off on; do
    serve "$mode"
    model_args=()
    [[ -n ${MODEL:-} ]] && model_args=(--model "$MODEL")
    result=$("$chatflow" bench --url "$url/v1" --concurrency "$concurrency" --duration "$duration" \
      --max-tokens "$max_tokens" "${model_args[@]}" --json 2>/dev/null)
    rate=$(grep -o '"request_throughput":[0-9.eE+-]*' <<<"$result" | cut -d: -f2 || true)
    failed=$(grep -o '"failed_requests":[0-9]*' <<<"$result" | cut -d: -f2 || true)
    if [[ -z $rate ]]; then echo "chatflow bench gave no result: $result" >&2; exit 1; fi
    extra=""
    if [[ $mode == on ]]; then
      sleep 1.5  # the last batch leaves within export_interval_ms
      metrics=$(curl -s "$url/metrics")
      exported=$(awk '/^chatflow:trace_spans_exported_total/ {print $2}' <<<"$metrics")
      dropped=$(awk '/^chatflow:trace_spans_dropped_total/ {print $2}' <<<"$metrics")
      extra="  spans exported $exported, dropped $dropped"
    fi
    stop
    rate=$(awk -v rate="$rate" 'BEGIN { printf "%.1f", rate + 0 }')  # Boost.JSON writes 1.2E4
    printf 'round %d  tracing %-3s  %10.1f req/s  failed %s%s\n' "$round" "$mode" "$rate" "$failed" "$extra"
    rates[$mode]+="$rate "
  done
done

median() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
off=$(median "${rates[off]}")
on=$(median "${rates[on]}")
awk -v off="$off" -v on="$on" 'BEGIN {
  printf "median: tracing off %.1f req/s, on %.1f req/s: on/off = %.1f%% (goal >= 95%%)\n", off, on, 100 * on / off }'
