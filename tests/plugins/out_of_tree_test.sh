#!/usr/bin/env bash
# Installs chatflow's SDK package into a scratch prefix, builds tests/plugins/out_of_tree
# against it with find_package(chatflow), inspects the plugin and runs it in a pipeline.
# Usage: out_of_tree_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
source=$2
chatflow="$build/chatflow"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cmake --install "$build" --prefix "$work/prefix" --component sdk >/dev/null
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$source/tests/plugins/out_of_tree" -B "$work/build" "${generator[@]}" \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
plugin="$work/build/libshout.so"

"$chatflow" stages --plugin "$plugin" >"$work/describe"
grep -q '^shout 0.1.0 (MIT), plugin ABI 1.1' "$work/describe" || { cat "$work/describe"; exit 1; }

cat >"$work/pipeline.yaml" <<YAML
version: 1
plugins: [$plugin]
stages:
  - {name: echo, type: echo}
  - {name: loud, type: shout, config: {suffix: "!!"}}
YAML
answer=$("$chatflow" run "$work/pipeline.yaml" --prompt "hello out there" 2>"$work/err") ||
  { cat "$work/err"; exit 1; }
if [[ $answer != "HELLO OUT THERE!!" ]]; then
  echo "expected 'HELLO OUT THERE!!', got '$answer'"
  exit 1
fi
# The same plugin found through CHATFLOW_PLUGIN_PATH, with no plugins: key.
mkdir "$work/path"
cp "$plugin" "$work/path/"
printf 'version: 1\nstages:\n  - {name: echo, type: echo}\n  - {name: loud, type: shout}\n' >"$work/bare.yaml"
answer=$(CHATFLOW_PLUGIN_PATH="$work/path" "$chatflow" run "$work/bare.yaml" --prompt "quiet" 2>"$work/err") ||
  { cat "$work/err"; exit 1; }
[[ $answer == "QUIET!" ]] || { echo "expected 'QUIET!', got '$answer'"; exit 1; }
CHATFLOW_PLUGIN_PATH="$work/path" "$chatflow" stages shout >"$work/described"
grep -q '^Stage type shout (stream stage, plugin shout 0.1.0' "$work/described" ||
  { cat "$work/described"; exit 1; }
echo "out-of-tree plugin: built against the installed package, inspected, run"
