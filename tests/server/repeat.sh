#!/bin/bash
# Runs one server test file ROUNDS times, two copies at a time, each under a time limit, and fails
# if any copy fails or hangs. Two at once on a busy machine is what showed a reload hang that a
# single run hit about once in ten (see framework/pipeline_core.cpp).
# Usage: repeat.sh NODE TEST.mjs ROUNDS
set -u
node=$1
test_file=$2
rounds=$3
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
failures=0
for round in $(seq 1 "$rounds"); do
  timeout 120 "$node" --test "$test_file" >"$logs/a" 2>&1 &
  first=$!
  timeout 120 "$node" --test "$test_file" >"$logs/b" 2>&1 &
  second=$!
  for copy in "$first:a" "$second:b"; do
    if ! wait "${copy%%:*}"; then
      failures=$((failures + 1))
      echo "round $round, copy ${copy##*:}: failed or hung (exit 124 means past 120 s)"
      tail -n 40 "$logs/${copy##*:}"
    fi
  done
done
echo "$((2 * rounds - failures)) of $((2 * rounds)) runs passed"
[ "$failures" -eq 0 ]
