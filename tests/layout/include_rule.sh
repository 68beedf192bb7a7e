#!/usr/bin/env bash
# The include rule of docs/development.md, checked on every source file: a folder may include
# only the folders listed for it. Prints each violation as file:line and exits 1.
set -u
cd "${1:-$(dirname "$0")/../..}" || exit 2

# folder -> the folders its files may include (besides system and library headers)
declare -A allowed=(
  [kernels]="kernels"
  [framework/api]="framework/api"
  [framework/text]="framework/text framework/api"
  [framework/net]="framework/net"
  [framework/storage]="framework/storage framework/net"
  [framework/grammar]="framework/grammar framework/text"
  [framework/engine]="framework/engine framework/grammar framework/text kernels"
  [framework/engine/cpu]="framework/engine framework/grammar framework/text kernels"
  [framework/loading]="framework/loading framework/api framework/text plugins/sdk"
  [framework/runtime]="framework/runtime framework/loading framework/api framework/text"
  [framework/chat]="framework/chat framework/api framework/grammar framework/text"
  [framework/openai]="framework/openai framework/chat framework/api framework/grammar framework/text"
  [framework/anthropic]="framework/anthropic framework/chat framework/api framework/text"
  [framework/responses]="framework/responses framework/chat framework/api framework/text"
  [framework/bridge]="framework/bridge framework/api framework/engine framework/grammar framework/text kernels"
)
domain="framework/cache framework/embedding framework/history framework/limits framework/moderation framework/retrieval framework/security framework/tools framework/tracing framework/upstream framework/usage"
for folder in $domain; do
  allowed[$folder]="framework/api framework/text framework/storage framework/net kernels $domain"
done
# What a folder still must not include among what it may: the engine reaches the CPU kernels only
# through its CPU backend (framework/engine/cpu/, a folder of its own above), so that nothing above
# the backend seam (framework/engine/backend.h) depends on one device's kernels.
declare -A excepted=(
  [framework/engine]="kernels/cpu"
)
# The outer rings and stages may include more; these are what they must never include.
declare -A forbidden=(
  [stages]="framework/server framework/cli"
  [plugins]="framework stages"
)

violations=0
report() {
  echo "$1: includes \"$2\" ($3)"
  violations=$((violations + 1))
}

while IFS= read -r file; do
  folder=""
  for candidate in "${!allowed[@]}" "${!forbidden[@]}"; do
    if [[ "$file" == "$candidate"/* && ${#candidate} -gt ${#folder} ]]; then folder=$candidate; fi
  done
  [ -n "$folder" ] || continue
  while IFS= read -r line; do
    number=${line%%:*}
    target=$(sed -E 's/^[0-9]+:[[:space:]]*#[[:space:]]*include[[:space:]]+"([^"]+)".*/\1/' <<<"$line")
    if [ -n "${allowed[$folder]+set}" ]; then
      ok=false
      for permitted in ${allowed[$folder]}; do
        [[ "$target" == "$permitted"/* ]] && ok=true
      done
      for banned in ${excepted[$folder]-}; do
        [[ "$target" == "$banned"/* ]] && ok=false
      done
      $ok || report "$file:$number" "$target" "$folder/ may include only: ${allowed[$folder]}${excepted[$folder]+ (not ${excepted[$folder]}/)}"
    else
      for banned in ${forbidden[$folder]}; do
        [[ "$target" == "$banned"/* ]] && report "$file:$number" "$target" "$folder/ must not include $banned/"
      done
    fi
  done < <(grep -n -E '^[[:space:]]*#[[:space:]]*include[[:space:]]+"' "$file")
done < <(git ls-files -- '*.h' '*.hpp' '*.cpp' '*.cu' | grep -v '^tests/')

if [ "$violations" -gt 0 ]; then
  echo "$violations include(s) break the rule in docs/development.md (the include rule)"
  exit 1
fi
echo "include rule: every file keeps to its folder's includes"
