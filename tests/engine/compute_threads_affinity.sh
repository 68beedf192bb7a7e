#!/usr/bin/env bash
# `threads` left at 0 follows the CPUs the process may use: under `taskset -c 0` the chatflow
# binary computes with one thread, whatever the machine has (the perplexity command says how
# many it used). Usage: compute_threads_affinity.sh PATH_TO_CHATFLOW
set -u
chatflow=$(realpath "$1")
command -v taskset >/dev/null || { echo "SKIP: no taskset"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$chatflow" make-model --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 --context 256 \
  --type f16 -o "$work/model.gguf" >/dev/null || exit 1
for i in $(seq 60); do printf 'the quick brown fox jumps over the lazy dog. '; done >"$work/text.txt"
pinned=$(taskset -c 0 "$chatflow" perplexity -m "$work/model.gguf" -f "$work/text.txt" --ctx 128 \
  --chunks 2 2>/dev/null | head -1)
case "$pinned" in
  *", 126 scored, 1 thread, "*) ;;
  *) echo "FAIL: pinned to CPU 0, expected 1 thread: $pinned"; exit 1 ;;
esac
free=$("$chatflow" perplexity -m "$work/model.gguf" -f "$work/text.txt" --ctx 128 --chunks 2 \
  2>/dev/null | head -1)
echo "ok: pinned to CPU 0 -> 1 thread (unpinned: ${free#*scored, })"
