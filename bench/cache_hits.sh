#!/usr/bin/env bash
# Server-side time of cache hits, read from the access log of a real `chatflow serve`
# (total_ms: request header read -> answer finished), as medians:
#   exact cache:    8 distinct greedy requests to the model, then repeats of them;
#   semantic cache: SEMANTIC_ENTRIES distinct questions (default 100000) fill one tenant's
#                   partition, then the first 3000 are asked again.
# Usage: bench/cache_hits.sh            (from the checkout, after building into build/)
set -euo pipefail
chatflow=$(realpath "${CHATFLOW_BIN:-build/chatflow}")
entries=${SEMANTIC_ENTRIES:-100000}
work=$(mktemp -d)
server=
trap '[[ -n $server ]] && kill $server 2>/dev/null; rm -rf "$work"' EXIT

# Starts `chatflow serve` on a free port; sets $server and $url.
serve() {
  "$chatflow" serve --port 0 --access-log "$work/access-$1.log" --pipeline "$2" >"$work/out-$1" 2>&1 &
  server=$!
  for _ in $(seq 600); do
    url=$(grep -o 'http://[0-9.:]*' "$work/out-$1" | head -1 || true)
    [[ -n $url ]] && return
    sleep 0.1
  done
  echo "the server did not start:" >&2; cat "$work/out-$1" >&2; exit 1
}
stop() { kill "$server"; wait "$server" || true; server=; }

# Median, p90 and count of total_ms over the access-log lines with the given note.
summarize() {
  grep -F "$2" "$1" | grep -o '"total_ms":[0-9.]*' | cut -d: -f2 | sort -g |
    awk -v what="$3" '{ v[NR] = $1 } END {
      if (NR == 0) { print what ": no such requests"; exit 1 }
      printf "%-34s median %.3f ms  p90 %.3f ms  (%d requests)\n", what, v[int((NR + 1) / 2)], v[int(NR * 0.9)], NR }'
}

cat >"$work/exact.yaml" <<YAML
version: 1
name: bench-exact
resources:
  llm: {type: gguf_model, path: "${CHATFLOW_MODEL:-auto}"}
stages:
  - {name: exact, type: exact_cache}
  - {name: tokenize, type: tokenize, config: {model: llm}}
  - {name: prefill, type: prefill, config: {model: llm}}
  - {name: decode, type: decode, config: {model: llm}}
  - {name: detokenize, type: detokenize, config: {model: llm}}
  - {name: emit, type: sse_emit}
edges:
  - exact.hit -> emit
YAML
serve exact "$work/exact.yaml"
"$chatflow" bench --url "$url" --distinct 8 --requests 8 --concurrency 1 --temperature 0 --max-tokens 32 >/dev/null
"$chatflow" bench --url "$url" --distinct 8 --requests 4000 --concurrency 1 --temperature 0 --max-tokens 32 >/dev/null
stop
summarize "$work/access-exact.log" '"cache":"exact"' "exact-cache hit"
grep -v '"cache":"exact"' "$work/access-exact.log" | grep -F '"path":"/v1/chat/completions"' >"$work/exact-misses.log" || true
summarize "$work/exact-misses.log" 'total_ms' "the same requests through the model"

"$chatflow" keys add --tenant bench --keys-file "$work/keys.yaml" >"$work/key" 2>/dev/null
cat >"$work/semantic.yaml" <<YAML
version: 1
name: bench-semantic
max_in_flight: 1024
resources:
  vectors: {type: embedder, kind: ngrams}
stages:
  - {name: auth, type: auth, config: {keys_file: "$work/keys.yaml"}}
  - {name: semantic, type: semantic_cache, config: {embedder: vectors, max_entries: $((entries + 1000))}}
  - {name: answer, type: echo}
  - {name: emit, type: sse_emit}
edges:
  - semantic.hit -> emit
YAML
serve semantic "$work/semantic.yaml"
key=$(cat "$work/key")
fill_start=$(date +%s.%N)
"$chatflow" bench --url "$url" --model bench-semantic --api-key "$key" --distinct "$entries" --requests "$entries" \
  --concurrency 16 --temperature 0.7 --max-tokens 16 >/dev/null
fill_end=$(date +%s.%N)
cp "$work/access-semantic.log" "$work/access-semantic.log.fill"
"$chatflow" bench --url "$url" --model bench-semantic --api-key "$key" --distinct "$entries" --requests 3000 \
  --concurrency 1 --temperature 0.7 --max-tokens 16 >/dev/null
stop
tail -n 3000 "$work/access-semantic.log" >"$work/semantic-hits.log"
fill_misses=$(grep -vc '"cache":"semantic"' "$work/access-semantic.log.fill" || true)
printf "semantic fill: %d requests in %.1f s, %d stored (misses)\n" "$entries" \
  "$(awk -v a="$fill_start" -v b="$fill_end" 'BEGIN { print b - a }')" "$fill_misses"
summarize "$work/semantic-hits.log" '"cache":"semantic"' "semantic hit ($entries entries)"
summarize "$work/access-semantic.log.fill" 'total_ms' "semantic miss + echo + insert"
