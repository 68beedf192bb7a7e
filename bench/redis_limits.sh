#!/usr/bin/env bash
# What Redis-backed rate limits add to a request: two `chatflow serve` that differ only in the
# rate_limit stage's `store:` (this process's memory, or a redis-server of our own on a free
# port), both in front of echo, driven one request at a time by `chatflow bench` in alternating
# rounds; the medians of the server-side total_ms of their access logs, and the difference (the
# Lua check-and-reserve and refund round trips). The target is a median difference <= 0.3 ms.
# Usage: bench/redis_limits.sh   (from the checkout, after building into build/; REQUESTS per
#                                 round, default 1000; ROUNDS, default 3)
set -euo pipefail
chatflow=$(realpath "${CHATFLOW_BIN:-build/chatflow}")
redis_server=${REDIS_SERVER:-$(command -v redis-server || true)}
[[ -n $redis_server ]] || { echo "redis-server is not installed (apt-get install redis-server)" >&2; exit 1; }
requests=${REQUESTS:-1000}
rounds=${ROUNDS:-3}
work=$(mktemp -d)
pids=()
trap 'for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$work"' EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

redis_port=$(free_port)
"$redis_server" --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
  --logfile "$work/redis.log" &
pids+=($!)
for _ in $(seq 100); do
  [[ $(printf 'PING\r\n' | timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$redis_port; cat >&3; head -c 5 <&3" 2>/dev/null) == +PONG ]] && break
  sleep 0.05
done

# The pipeline with `store:` set (or not).
pipeline() {
  cat >"$work/$1.yaml" <<YAML
version: 1
name: bench
resources:
  shared: {type: redis, url: "redis://127.0.0.1:$redis_port"}
stages:
  - {name: limits, type: rate_limit, config: {rpm: 100000000 $2}}
  - {name: echo, type: echo}
YAML
}
pipeline memory ""
pipeline redis ", store: shared, on_error: fail_closed"

# Starts `chatflow serve` with pipeline $1 (in this shell, so the trap stops it); sets $url.
serve() {
  "$chatflow" serve --port 0 --access-log "$work/access-$1.log" --pipeline "$work/$1.yaml" >"$work/out-$1" 2>&1 &
  pids+=($!)
  for _ in $(seq 600); do
    url=$(grep -o 'http://[0-9.:]*' "$work/out-$1" | head -1 || true)
    [[ -n $url ]] && return
    sleep 0.1
  done
  echo "the server did not start:" >&2; cat "$work/out-$1" >&2; exit 1
}
serve memory
memory_url=$url
serve redis
redis_url=$url

run() { "$chatflow" bench --url "$1" --requests "$2" --concurrency 1 --max-tokens 8 >/dev/null; }
run "$memory_url" 200  # warm both up: connections, the script loaded into Redis
run "$redis_url" 200
: >"$work/access-memory.log"
: >"$work/access-redis.log"
for _ in $(seq "$rounds"); do
  run "$memory_url" "$requests"
  run "$redis_url" "$requests"
done

values() { grep -F '"path":"/v1/chat/completions"' "$1" | grep -o '"total_ms":[0-9.]*' | cut -d: -f2 | sort -g; }
quantile() { awk -v q="$1" '{ v[NR] = $1 } END { i = int(NR * q); if (i < 1) i = 1; printf "%.3f", v[i] }'; }
memory_p50=$(values "$work/access-memory.log" | quantile 0.5)
redis_p50=$(values "$work/access-redis.log" | quantile 0.5)
printf '%-30s p50 %s ms  p90 %s ms  (%d requests)\n' "in-memory limits" "$memory_p50" \
  "$(values "$work/access-memory.log" | quantile 0.9)" "$(values "$work/access-memory.log" | wc -l)"
printf '%-30s p50 %s ms  p90 %s ms  (%d requests)\n' "Redis limits (store: redis)" "$redis_p50" \
  "$(values "$work/access-redis.log" | quantile 0.9)" "$(values "$work/access-redis.log" | wc -l)"
awk -v a="$memory_p50" -v b="$redis_p50" 'BEGIN { printf "added by Redis: p50 %.3f ms (target <= 0.3 ms)\n", b - a }'
