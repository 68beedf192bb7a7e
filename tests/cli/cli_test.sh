#!/usr/bin/env bash
# The chatflow command line as a user runs it: exit codes, output, error locations.
# Usage: cli_test.sh PATH_TO_CHATFLOW SOURCE_DIR
set -u
chatflow=$(realpath "$1")
cd "$2" || exit 1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
passes=0

check() {  # check NAME CONDITION...
  local name=$1
  shift
  if "$@"; then
    passes=$((passes + 1))
  else
    echo "FAIL: $name"
    failures=$((failures + 1))
  fi
}

# run: streams the echo pipeline through the uppercase stream stage.
out=$("$chatflow" run graphs/echo.yaml --prompt "hello pipeline" 2>"$work/err"); rc=$?
check "run exits 0" test $rc -eq 0
check "run prints the stream" test "$out" = "HELLO PIPELINE"

# validate: every error of a file, each as file:line:col: error:
cat >"$work/bad.yaml" <<'YAML'
version: 1
stages:
  - {name: echo, type: ecoh}
  - {name: shout, type: uppercase, config: {loud: true}}
YAML
"$chatflow" validate "$work/bad.yaml" >"$work/out" 2>"$work/err"; rc=$?
check "validate of a bad file exits 1" test $rc -eq 1
check "unknown type located with suggestion" grep -q "bad.yaml:3:24: error: stage 'echo': unknown stage type 'ecoh'; did you mean 'echo'?" "$work/err"
check "unknown key located" grep -q "bad.yaml:4:45: error: stage 'shout' (uppercase): unknown key 'loud'" "$work/err"
check "validate reports both errors" test "$(wc -l <"$work/err")" -eq 2

"$chatflow" validate graphs/echo.yaml >"$work/out" 2>&1; rc=$?
check "validate of a good file exits 0" test $rc -eq 0
check "validate says ok" grep -q "graphs/echo.yaml: ok: pipeline 'echo', 2 stages" "$work/out"

"$chatflow" validate "$work/missing.yaml" 2>"$work/err"; rc=$?
check "missing file exits 1" test $rc -eq 1
check "missing file message" grep -q "missing.yaml: error: cannot open file: No such file or directory" "$work/err"

printf 'version: 1\nstages: [\n' >"$work/broken.yaml"
"$chatflow" validate "$work/broken.yaml" 2>"$work/err"; rc=$?
check "YAML syntax error exits 1" test $rc -eq 1
check "YAML syntax error located" grep -qE "broken.yaml:[0-9]+:[0-9]+: error: invalid YAML" "$work/err"

# graph: DOT that Graphviz renders, and Mermaid.
"$chatflow" graph graphs/echo.yaml --format dot >"$work/graph.dot"; rc=$?
check "graph dot exits 0" test $rc -eq 0
if command -v dot >/dev/null; then
  dot -Tsvg "$work/graph.dot" >"$work/graph.svg" 2>"$work/err"; rc=$?
  check "dot renders the graph" test $rc -eq 0
  check "the SVG names the stages" grep -q "shout" "$work/graph.svg"
else
  echo "SKIP: Graphviz 'dot' is not installed; the DOT output was not rendered"
fi
"$chatflow" graph graphs/echo.yaml --format mermaid >"$work/graph.mmd"
check "mermaid output" grep -q "s0 ==>|out| s1" "$work/graph.mmd"
"$chatflow" graph graphs/echo.yaml --format svg >/dev/null 2>"$work/err"; rc=$?
check "unknown format is a usage error" test $rc -eq 2

# stages: list, describe, and an unknown type with a suggestion.
"$chatflow" stages >"$work/out"
check "stages lists echo" grep -qE "^  echo +request +out" "$work/out"
"$chatflow" stages echo >"$work/out"
check "stages echo shows its keys" grep -q "words_per_chunk" "$work/out"
"$chatflow" stages uppercse 2>"$work/err"; rc=$?
check "unknown type exits 1" test $rc -eq 1
check "unknown type suggests" grep -q "did you mean 'uppercase'?" "$work/err"

# bench-graph: the JSON has one result per in-flight level asked for.
"$chatflow" bench-graph --requests 2000 --in-flight 1,4 --json >"$work/bench.json"; rc=$?
check "bench-graph exits 0" test $rc -eq 0
check "bench-graph reports both levels" test "$(grep -o '"in_flight": [0-9]*' "$work/bench.json" | tr '\n' ' ')" = '"in_flight": 1 "in_flight": 4 '

# usage errors
"$chatflow" >/dev/null 2>&1; rc=$?
check "no subcommand is a usage error" test $rc -eq 2
"$chatflow" run graphs/echo.yaml >/dev/null 2>&1; rc=$?
check "missing --prompt is a usage error" test $rc -eq 2

echo "$passes passed, $failures failed"
test $failures -eq 0
