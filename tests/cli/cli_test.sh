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

# A build with CUDA starts without cuBLAS (215 MiB of libcublasLt mapped at every start): it is
# loaded only when the CUDA backend starts.
LD_DEBUG=libs "$chatflow" run graphs/echo.yaml --prompt "x" >/dev/null 2>"$work/libs"
check "no cuBLAS loaded by a run on the CPU" test "$(grep -c 'libcublas' "$work/libs")" -eq 0
check "the loader's list was captured" grep -q "libc.so" "$work/libs"

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
"$chatflow" graph graphs/echo.yaml --format svg >"$work/graph.svg"
check "svg output" grep -q '<g class="stage" data-stage="echo"' "$work/graph.svg"
"$chatflow" graph graphs/echo.yaml --format png >/dev/null 2>"$work/err"; rc=$?
check "unknown format is a usage error" test $rc -eq 2

# stages: list, describe, and an unknown type with a suggestion.
"$chatflow" stages >"$work/out"
check "stages lists echo" grep -qE "^  echo +request +out" "$work/out"
"$chatflow" stages echo >"$work/out"
check "stages echo shows its keys" grep -q "words_per_chunk" "$work/out"
"$chatflow" stages uppercse 2>"$work/err"; rc=$?
check "unknown type exits 1" test $rc -eq 1
check "unknown type suggests" grep -q "did you mean 'uppercase'?" "$work/err"

# stages TYPE: for every type, each key's row is its name, its type and its default or
# 'required', at least two spaces apart (a long key or type ran into the next column before).
key_types='a boolean \(true or false\)|an integer|a number|a string|a list of strings|a mapping of strings|a mapping|a list of mappings|any value'
bad_rows=""
for type in $("$chatflow" stages | awk '/^  [a-z]/ {print $1}'); do
  "$chatflow" stages "$type" | awk -v type="$type" -v types="^($key_types)$" '
    /Config keys/ { keys = 1; next }
    keys && /^    [^ (]/ {
      n = split(substr($0, 5), field, /  +/)
      if (n < 2 || field[2] !~ types || (n == 3 && field[3] !~ /^(required|default .*)$/) || n > 3) print type ": " $0
    }' >>"$work/bad_rows"
done
check "every key row of every type has its columns apart" test ! -s "$work/bad_rows"
test -s "$work/bad_rows" && head -5 "$work/bad_rows"
"$chatflow" stages gguf_model >"$work/out"
check "a long key and a long type stay apart" grep -qE "^    scheduler\.max_batched_tokens +an integer +default 2048$" "$work/out"
check "a boolean's type and its default stay apart" grep -qE "^    tokenizer_only +a boolean \(true or false\) +default false$" "$work/out"
check "gguf_model names the eight architectures the engine reads" grep -q "A GGUF model (llama, qwen2, qwen2moe, qwen3, qwen3moe, gemma2, gemma3, phi3)" "$work/out"
"$chatflow" stages | awk 'length($0) > 0 && /^  [a-z]/ && !/^  [a-z_]+ +(request|stream) +[a-z, ]+  +[A-Z]/ && !/^  [a-z_]+ +[A-Z]/' >"$work/out"
check "the type list keeps its columns apart" test ! -s "$work/out"

# stages --markdown and --metrics-markdown: the generated references (tests/docs compares them
# with docs/reference/).
"$chatflow" stages --markdown >"$work/stages.md"; rc=$?
check "stages --markdown exits 0" test $rc -eq 0
check "stages --markdown has a section per type" sh -c "grep -qx '### gguf_model' '$work/stages.md' && grep -qx '### upstream_generate' '$work/stages.md'"
check "stages --markdown lists nested keys with type, default and range" grep -qF '| `scheduler.max_batched_tokens` | integer | `2048` | 16..1048576 | tokens per forward step at most |' "$work/stages.md"
"$chatflow" stages --markdown gguf_model >/dev/null 2>&1; rc=$?
check "stages --markdown with a type is a usage error" test $rc -eq 2
"$chatflow" stages --metrics-markdown >"$work/metrics.md"; rc=$?
check "stages --metrics-markdown exits 0" test $rc -eq 0
check "the metrics reference names each metric with its type and labels" sh -c "grep -qF '| \`chatflow:engine_steps_total\` | counter | \`model_name\` | Batched forward passes. |' '$work/metrics.md' && grep -qF '| \`chatflow:arm_requests_total\` | counter | \`pipeline\`, \`arm\`, \`status\` |' '$work/metrics.md'"

# --help: every option of every command (and of keys' subcommands) says what it does.
commands=$("$chatflow" --help | sed -n '/^Subcommands:/,/^$/p' | awk 'NR > 1 && NF {print $1}')
check "--help lists the commands" test "$(echo "$commands" | wc -l)" -ge 26
for command in $commands "keys add" "keys list" "keys revoke"; do
  # CLI11 writes an option's description from column 31, or on the next line when the option's
  # own text is too long for that.
  $chatflow $command --help | awk -v command="$command" '
    function undescribed() { if (pending) print command ": " pending; pending = "" }
    /^  -/ { undescribed(); if (!(length($0) > 30 && substr($0, 29, 2) == "  " && substr($0, 31, 1) != " ")) pending = $0; next }
    /^                              [^ ]/ { pending = ""; next }
    { undescribed() }
    END { undescribed() }'
done >"$work/undescribed"
check "every option of every command has a description" test ! -s "$work/undescribed"
test -s "$work/undescribed" && cat "$work/undescribed"
"$chatflow" --help >"$work/out"
check "--help points to each command's help and the docs" grep -q 'chatflow COMMAND --help. lists a command.s options; docs/cli.md describes them all' "$work/out"
"$chatflow" stages --help >"$work/out"
check "a command's help does not repeat the top-level footer" sh -c "! grep -q 'docs/cli.md describes' '$work/out'"

# quickstart: `path` links chatflow into a folder (as it does after run and build).
if [ -x build/chatflow ]; then
  CHATFLOW_BIN_DIR="$work/bin" scripts/quickstart.sh path >"$work/out" 2>&1; rc=$?
  check "quickstart path links build/chatflow" sh -c "test $rc -eq 0 && test \"\$(readlink '$work/bin/chatflow')\" = '$PWD/build/chatflow'"
  check "quickstart path prints the PATH line for a folder not on PATH" grep -qF "export PATH=\"$PWD/build:\$PATH\"" "$work/out"
  rm "$work/bin/chatflow" && echo 'not ours' >"$work/bin/chatflow"
  CHATFLOW_BIN_DIR="$work/bin" scripts/quickstart.sh path >"$work/out" 2>&1
  check "quickstart path leaves a chatflow that is not a symlink alone" sh -c "test \"\$(cat '$work/bin/chatflow')\" = 'not ours' && grep -q 'is not a symlink; left as it is' '$work/out'"
else
  echo "SKIP: build/chatflow is not built; quickstart path not tested"
fi

# bench-graph: the JSON has one result per in-flight level asked for.
"$chatflow" bench-graph --requests 2000 --in-flight 1,4 --json >"$work/bench.json"; rc=$?
check "bench-graph exits 0" test $rc -eq 0
check "bench-graph reports both levels" test "$(grep -o '"in_flight": [0-9]*' "$work/bench.json" | tr '\n' ' ')" = '"in_flight": 1 "in_flight": 4 '

# make-model, inspect, tokenize, detokenize, generate: the engine from the command line.
"$chatflow" make-model --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 --context 1024 --type q8_0 -o "$work/model.gguf" >"$work/out"; rc=$?
check "make-model exits 0" test $rc -eq 0
check "make-model reports parameters" grep -q "parameters (q8_0)" "$work/out"
"$chatflow" make-model --dim 48 --type q4_0 -o "$work/bad.gguf" 2>"$work/err"; rc=$?
check "make-model refuses rows that are not whole blocks" test $rc -eq 1
check "make-model says why" grep -q "q4_0 needs rows of whole 32-value blocks, but token_embd.weight has 48 values per row" "$work/err"
"$chatflow" make-model --arch gemma2 --dim 64 --layers 2 --heads 4 --ffn 128 -o "$work/gemma2.gguf" >/dev/null; rc=$?
check "make-model writes gemma2" test $rc -eq 0
"$chatflow" inspect "$work/gemma2.gguf" >"$work/out"
check "a gemma2 file has post-norms and soft-capping" sh -c "grep -q 'blk.0.post_ffw_norm.weight' '$work/out' && grep -qE 'gemma2.final_logit_softcapping +float32 30' '$work/out'"
check "a gemma2 file ties its output to the embeddings" sh -c "! grep -q '^ *output.weight' '$work/out'"
check "a gemma2 file generates" sh -c "'$chatflow' generate --model '$work/gemma2.gguf' --prompt hello --temperature 0 --max-tokens 4 >/dev/null"
"$chatflow" make-model --arch phi3 --dim 64 --layers 1 --heads 4 --ffn 128 --rope-scaling longrope -o "$work/phi3.gguf" >/dev/null
"$chatflow" inspect "$work/phi3.gguf" >"$work/out"
check "a phi3 file has fused projections and LongRoPE factors" sh -c "grep -qE 'blk.0.attn_qkv.weight +f32 +\[64, 192\]' '$work/out' && grep -q 'rope_factors_long.weight' '$work/out'"
"$chatflow" make-model --arch llama --rope-scaling longrope -o "$work/bad.gguf" 2>"$work/err"; rc=$?
check "make-model refuses longrope outside phi3" sh -c "test $rc -eq 1 && grep -q 'longrope is phi3' '$work/err'"
"$chatflow" inspect "$work/model.gguf" >"$work/out"
check "inspect shows metadata" grep -qE "llama.block_count +uint32 2" "$work/out"
check "inspect shows tensors" grep -qE "blk.0.attn_q.weight +q8_0 +\[64, 64\]" "$work/out"
printf 'Hello, wide world! 你好' >"$work/text.txt"
"$chatflow" tokenize --model "$work/model.gguf" --file "$work/text.txt" >"$work/ids"; rc=$?
check "tokenize exits 0" test $rc -eq 0
"$chatflow" detokenize --model "$work/model.gguf" --file "$work/ids" >"$work/back"; rc=$?
check "detokenize exits 0" test $rc -eq 0
check "detokenize reverses tokenize" cmp -s "$work/text.txt" "$work/back"
listed=$("$chatflow" tokenize -m "$work/model.gguf" -p 'Hello, wide world! 你好' --ids --no-bos)
check "tokenize takes llama-tokenize's flags and prints its list" test "$listed" = "[$(tr ' ' '\n' <"$work/ids" | paste -sd, - | sed 's/,/, /g')]"
echo "7 99999" | "$chatflow" detokenize --model "$work/model.gguf" >/dev/null 2>"$work/err"; rc=$?
check "detokenize refuses unknown ids" test $rc -eq 1
check "detokenize names the bad id" grep -q "'99999' is not a token id" "$work/err"

# chat-template: a template file over a conversation, as transformers renders it.
cat >"$work/chat.jinja" <<'JINJA'
{%- for m in messages %}
  {{- bos_token if loop.first }}<|{{ m.role }}|>{{ m.content | trim }}
{% endfor %}
{%- if add_generation_prompt %}<|assistant|>{% endif %}
{{- ' ' ~ strftime_now('%Y-%m-%d') if show_date is defined and show_date }}
JINJA
printf '[{"role": "user", "content": " hi {{ 7*7 }} "}, {"role": "assistant", "content": "ok"}]' >"$work/messages.json"
out=$("$chatflow" chat-template --template-file "$work/chat.jinja" --messages "$work/messages.json" \
  --add-generation-prompt --var bos_token='<s>' --var show_date=true --now 2024-07-26T10:00:00); rc=$?
check "chat-template exits 0" test $rc -eq 0
check "chat-template prints the rendering" test "$out" = "$(printf '<s><|user|>hi {{ 7*7 }}\n<|assistant|>ok\n<|assistant|> 2024-07-26')"
printf '{{ raise_exception("no " ~ messages[0].role) }}' >"$work/raises.jinja"
"$chatflow" chat-template --template-file "$work/raises.jinja" --messages "$work/messages.json" 2>"$work/err"; rc=$?
check "a template that raises exits 1" test $rc -eq 1
check "with the template's message" grep -q "no user" "$work/err"
printf 'ok\n  {%% frobnicate %%}' >"$work/unsupported.jinja"
"$chatflow" chat-template --template-file "$work/unsupported.jinja" --messages "$work/messages.json" 2>"$work/err"; rc=$?
check "an unsupported template exits 1" test $rc -eq 1
check "located by line and column" grep -q "unsupported.jinja:2:6: unknown tag 'frobnicate'" "$work/err"
first=$("$chatflow" generate --model "$work/model.gguf" --prompt "hello" --temperature 0 --max-tokens 8)
second=$("$chatflow" generate --model "$work/model.gguf" --prompt "hello" --temperature 0 --max-tokens 8)
check "greedy generation is deterministic" test "$first" = "$second"
seeded1=$("$chatflow" generate --model "$work/model.gguf" --prompt "hello" --temperature 1 --seed 5 --max-tokens 8)
seeded2=$("$chatflow" generate --model "$work/model.gguf" --prompt "hello" --temperature 1 --seed 5 --max-tokens 8)
check "seeded sampling is reproducible" test "$seeded1" = "$seeded2"
"$chatflow" generate --model "$work/missing.gguf" --prompt "x" 2>"$work/err"; rc=$?
check "generate with a missing model exits 1" test $rc -eq 1
check "generate says the file is missing" grep -q "missing.gguf: cannot open: No such file or directory" "$work/err"
printf 'GGUF\x03\x00\x00\x00' >"$work/truncated.gguf"
"$chatflow" generate --model "$work/truncated.gguf" --prompt "x" 2>"$work/err"; rc=$?
check "a truncated model exits 1" test $rc -eq 1
check "a truncated model names the offset" grep -q "invalid GGUF at offset 8: expected the tensor count" "$work/err"
"$chatflow" bench-engine "$work/model.gguf" --threads 1 --repetitions 1 --json >"$work/engine.json"; rc=$?
check "bench-engine exits 0" test $rc -eq 0
check "bench-engine JSON has the four figures" grep -qE '^\[\{"threads": 1, "pp128": [0-9.]+, "pp512": [0-9.]+, "tg128": [0-9.]+\}\]$' "$work/engine.json"
"$chatflow" bench-engine "$work/model.gguf" --compare-llama-cpp "$work/no-such-dir" >"$work/out" 2>&1; rc=$?
check "bench-engine --compare-llama-cpp needs an existing folder" sh -c "test $rc -eq 2 && grep -q 'no-such-dir' '$work/out'"
mkdir -p "$work/empty-bin"
"$chatflow" bench-engine "$work/model.gguf" --threads 1 --repetitions 1 --compare-llama-cpp "$work/empty-bin" >"$work/out" 2>&1; rc=$?
check "bench-engine says when llama-bench cannot run" sh -c "test $rc -eq 1 && grep -q 'empty-bin/llama-bench.* failed' '$work/out'"
if [ -f ../shared/models/stories260K/stories260K.gguf ]; then
  printf 'Once upon a time' >"$work/once.txt"
  ids=$("$chatflow" tokenize --model ../shared/models/stories260K/stories260K.gguf --file "$work/once.txt" --bos)
  check "stories260K tokenizes as llama.cpp does" test "$ids" = "1 403 407 261 378"
else
  echo "SKIP: ../shared/models/stories260K is not present"
fi

# run: the minimal model pipeline, on the model written above.
out=$(CHATFLOW_MODEL="$work/model.gguf" "$chatflow" run graphs/minimal.yaml --prompt "hello" --temperature 0 --max-tokens 8 2>"$work/err"); rc=$?
check "run minimal.yaml exits 0" test $rc -eq 0
again=$(CHATFLOW_MODEL="$work/model.gguf" "$chatflow" run graphs/minimal.yaml --prompt "hello" --temperature 0 --max-tokens 8)
check "run minimal.yaml is deterministic at temperature 0" test "$out" = "$again"
direct=$("$chatflow" generate --model "$work/model.gguf" --prompt "hello" --temperature 0 --max-tokens 8)
check "the pipeline answers as the engine does (plain template)" test "$out" = "$direct"
CHATFLOW_MODEL="$work/nothing.gguf" "$chatflow" run graphs/minimal.yaml --prompt "x" 2>"$work/err"; rc=$?
check "a missing model fails the build with its location" grep -q "minimal.yaml:8:3: error: resource 'llm' (gguf_model): .*nothing.gguf: cannot open" "$work/err"
check "... and exits 1" test $rc -eq 1
if [ -f ../shared/models/stories260K/stories260K.gguf ]; then
  out=$(env -u CHATFLOW_MODEL "$chatflow" run graphs/minimal.yaml --prompt "Once upon a time" --temperature 0 --max-tokens 16)
  check "the default model is found in ../shared" test "$out" = ", there was a little girl named Lily. She loved to play"
fi

# chat.yaml: auth, limits, quota and moderation in front of the model.
export CHATFLOW_KEYS_FILE="$work/keys.yaml" CHATFLOW_USAGE_DB="$work/usage.db" CHATFLOW_HISTORY_DB="$work/history.db"
export CHATFLOW_DOCUMENTS_INDEX="$work/documents-index"
CHATFLOW_MODEL="$work/model.gguf" "$chatflow" validate graphs/chat.yaml >"$work/out" 2>"$work/err"; rc=$?
check "validate chat.yaml exits 0" test $rc -eq 0
check "the first build creates a keys file with a development key" grep -q "created $work/keys.yaml with a development key" "$work/err"
key=$(grep -o "cf-[0-9a-f]*" "$work/err" | head -1)
check "the keys file holds its hash, not the key" sh -c "! grep -q '$key' '$work/keys.yaml' && grep -q sha256 '$work/keys.yaml'"
CHATFLOW_MODEL="$work/model.gguf" "$chatflow" run graphs/chat.yaml --prompt "hello" --max-tokens 4 >/dev/null 2>"$work/err"; rc=$?
check "run chat.yaml without a key is refused (401)" grep -q "request failed: 401 authentication_error" "$work/err"
check "... and exits 1" test $rc -eq 1
CHATFLOW_MODEL="$work/model.gguf" "$chatflow" run graphs/chat.yaml --api-key "$key" --prompt "hello" --max-tokens 4 >/dev/null 2>"$work/err"; rc=$?
check "run chat.yaml with the development key exits 0" test $rc -eq 0
CHATFLOW_MODEL="$work/model.gguf" "$chatflow" run graphs/chat.yaml --api-key "$key" --prompt "how do I build a bomb" >/dev/null 2>"$work/err"; rc=$?
check "a block-listed prompt is refused with content_filter" grep -q "request failed: 400 invalid_request_error: the request was blocked by the content filter" "$work/err"
"$chatflow" keys add --tenant acme --role admin --keys-file "$work/keys.yaml" >"$work/newkey" 2>"$work/err"
check "keys add prints one key" grep -qx "cf-[0-9a-f]\{48\}" "$work/newkey"
"$chatflow" keys list --keys-file "$work/keys.yaml" >"$work/out"
check "keys list shows both tenants" sh -c "grep -q ' dev ' '$work/out' && grep -q ' acme ' '$work/out'"
"$chatflow" usage --database "$work/usage.db" >"$work/out" 2>&1; rc=$?
check "usage reads the ledger the quota stage wrote" sh -c "test $rc -eq 0 && grep -q '^dev ' '$work/out'"
unset CHATFLOW_KEYS_FILE CHATFLOW_USAGE_DB CHATFLOW_HISTORY_DB CHATFLOW_DOCUMENTS_INDEX

# retrieval: index, re-index, evaluate on a collection whose answers are known
mkdir -p "$work/docs"
printf '# Leave\nEvery employee has 25 days of leave.\n' >"$work/docs/leave.md"
printf 'Travel is refunded within 30 days.\n' >"$work/docs/travel.txt"
"$chatflow" index "$work/docs" --out "$work/index" >"$work/out" 2>&1; rc=$?
check "index builds from a folder" sh -c "test $rc -eq 0 && grep -q '^2 documents: 2 added, 0 replaced, 0 unchanged' '$work/out'"
"$chatflow" index "$work/docs" --out "$work/index" >"$work/out" 2>&1
check "re-indexing unchanged documents changes nothing" grep -q '^2 documents: 0 added, 0 replaced, 2 unchanged' "$work/out"
printf '# Leave\nEvery employee has 27 days of leave.\n' >"$work/docs/leave.md"
"$chatflow" index "$work/docs" --out "$work/index" >"$work/out" 2>&1
check "an edited document is replaced" grep -q '^2 documents: 0 added, 1 replaced, 1 unchanged; 1 chunks added, 1 removed' "$work/out"
rm "$work/docs/travel.txt"
"$chatflow" index "$work/docs" --out "$work/index" --prune >"$work/out" 2>&1
check "--prune drops a document deleted from the folder" sh -c "grep -q '^pruned 1 documents' '$work/out' && grep -q ': 1 chunks,' '$work/out'"
printf '{"id": "a", "text": "fine"}\n{"id": "b", "title": 3}\n' >"$work/bad.jsonl"
"$chatflow" index "$work/bad.jsonl" --out "$work/index2" >"$work/out" 2>&1; rc=$?
check "a broken JSONL line is named" sh -c "test $rc -eq 1 && grep -q 'bad.jsonl:2:1: ' '$work/out'"
mkdir -p "$work/tiny"
printf '.I 1\n.T\nswept wings\n.W\nswept wings at supersonic speed\n.I 2\n.T\nboundary layers\n.W\nlaminar boundary layer transition\n.I 3\n.T\nnozzles\n.W\nheat transfer in rocket nozzles\n' >"$work/tiny/tiny.all"
printf '.I 001\n.W\nsupersonic swept wings\n.I 002\n.W\nboundary layer transition\n.I 003\n.W\nrocket nozzle heat transfer\n' >"$work/tiny/tiny.qry"
printf '1 1 1\n2 2 2\n3 3 1\n' >"$work/tiny/tinyqrel"
"$chatflow" eval-retrieval --collection "$work/tiny" --metric ndcg@10,recall@100,mrr >"$work/out" 2>"$work/err"; rc=$?
check "eval-retrieval: BM25 puts each query's one relevant document first" sh -c "test $rc -eq 0 && grep -Eq '^bm25 +1\.0000 +1\.0000 +1\.0000 ' '$work/out'"
check "eval-retrieval prints the four methods" sh -c "grep -q '^dense ' '$work/out' && grep -q '^hybrid ' '$work/out' && grep -q '^hybrid+rerank ' '$work/out'"
"$chatflow" eval-retrieval --collection "$work/tiny" --metric ndcg@x >"$work/out" 2>&1; rc=$?
check "a bad metric is named" sh -c "test $rc -eq 1 && grep -q \"'ndcg@x': expected a positive cutoff\" '$work/out'"

# quantize, inspect --against, perplexity: a model written by make-model, quantised, read back.
"$chatflow" make-model --dim 256 --layers 2 --heads 4 --ffn 512 --type f16 --weight-scale 0.02 -o "$work/m-f16.gguf" >/dev/null 2>&1
"$chatflow" quantize "$work/m-f16.gguf" "$work/m-q4km.gguf" q4_k_m --threads 2 --verbose >"$work/out" 2>"$work/err"; rc=$?
check "quantize q4_k_m exits 0" test $rc -eq 0
check "quantize gives the output matrix q6_k" grep -Eq '\] output.weight +\[256 x [0-9]+\] +f16 -> q6_k +rms error' "$work/out"
# llama.cpp's q4_k_m gives more bits to the last eighth of the layers' attn_v and ffn_down
# (with two layers: layer 1 only).
check "quantize gives attn_v and ffn_down of the last layer q6_k, the rest q4_k" sh -c "grep -q 'blk.1.attn_v.weight .* f16 -> q6_k' '$work/out' && grep -q 'blk.1.ffn_down.weight .* f16 -> q6_k' '$work/out' && grep -q 'blk.0.attn_v.weight .* f16 -> q4_k' '$work/out' && grep -q 'blk.0.ffn_up.weight .* f16 -> q4_k' '$work/out'"
check "quantize keeps norms as they are" grep -q 'blk.0.attn_norm.weight .* f32 -> f32$' "$work/out"
check "quantize reports sizes in bits per weight" grep -Eq 'q4_k_m, .* \(16\.[0-9]+ bits per weight\) -> .* \([45]\.[0-9]+ bits per weight\)' "$work/out"
"$chatflow" inspect "$work/m-q4km.gguf" --against "$work/m-f16.gguf" --all-tensors >"$work/out" 2>&1
check "inspect --against prints each tensor's difference" sh -c "grep -Eq 'blk.1.ffn_down.weight +q6_k .*rms difference [0-9.e+-]+ \(' '$work/out' && grep -q 'general.file_type *uint32 15' '$work/out'"
"$chatflow" generate --model "$work/m-q4km.gguf" --prompt "hello" --max-tokens 4 --temperature 0 >"$work/out" 2>&1; rc=$?
check "the quantised file generates" test $rc -eq 0
awk 'BEGIN { for (i = 0; i < 400; i++) printf "the cat sat on the mat and looked at the dog %d times\n", i }' >"$work/text.txt"
"$chatflow" perplexity -m "$work/m-q4km.gguf" -f "$work/text.txt" --ctx 128 --chunks 3 -t 2 --kl-divergence-base "$work/base.lp" >/dev/null 2>&1
"$chatflow" perplexity -m "$work/m-f16.gguf" -f "$work/text.txt" --ctx 128 --chunks 3 -t 2 >"$work/out" 2>"$work/err"; rc=$?
check "perplexity ends with 'perplexity: X ± Y'" sh -c "test $rc -eq 0 && grep -Eq '^perplexity: [0-9]+\.[0-9]{4} ± [0-9]+\.[0-9]{4}$' '$work/out' && grep -q '3 windows of 128 tokens, 189 scored' '$work/out'"
"$chatflow" perplexity -m "$work/m-f16.gguf" -f "$work/text.txt" --ctx 128 --chunks 3 -t 2 --kl-divergence-base "$work/base.lp" --kl-divergence --json >"$work/out" 2>&1; rc=$?
check "kl-divergence against the quantised run" sh -c "test $rc -eq 0 && grep -Eq '\"kl_divergence\": 0\.[0-9]+' '$work/out' && grep -Eq '\"top_token_agreement\": (0|1)\.[0-9]+' '$work/out'"
head -n 8 "$work/text.txt" >"$work/short.txt"
"$chatflow" perplexity -m "$work/m-f16.gguf" -f "$work/short.txt" --ctx 512 -t 2 >"$work/out" 2>&1; rc=$?
check "a text too short for two windows is refused" sh -c "test $rc -eq 1 && grep -q 'the text has 410 tokens; a context of 512 needs at least 1024' '$work/out'"
"$chatflow" quantize "$work/m-f16.gguf" "$work/x.gguf" q4_k_x >"$work/out" 2>&1; rc=$?
check "an unknown quantisation type is a usage error naming the types" sh -c "test $rc -eq 2 && grep -q \"unknown type 'q4_k_x' (expected one of: f32, f16\" '$work/out'"
"$chatflow" quantize "$work/m-q4km.gguf" "$work/x.gguf" q8_0 >"$work/out" 2>&1; rc=$?
check "requantising needs --allow-requantize" sh -c "test $rc -eq 1 && grep -q 'is already q4_k' '$work/out'"

# serve: a trusted proxy that is no CIDR stops the server before it listens, at its location.
mkdir -p "$work/serve"
printf 'server:\n  port: 0\n  trusted_proxies: [127.0.0.1/32, nginx]\npipeline: %s\n' "$PWD/graphs/echo.yaml" >"$work/serve/serve.yaml"
timeout 20 "$chatflow" serve --config "$work/serve/serve.yaml" >"$work/out" 2>&1; rc=$?
check "a bad trusted proxy in a serve file is located" sh -c "test $rc -eq 1 && grep -q \"serve.yaml:3:20: error: server.trusted_proxies: 'nginx' is not an IP address or CIDR\" '$work/out'"
timeout 20 "$chatflow" serve --pipeline graphs/echo.yaml --port 0 --trusted-proxies 10.0.0.0/40 >"$work/out" 2>&1; rc=$?
check "a bad --trusted-proxies is a usage error" sh -c "test $rc -eq 2 && grep -q \"'10.0.0.0/40': a prefix of 40 bits is longer than an IPv4 address\" '$work/out'"

# serve: once ready it prints the chat page's and dashboard's full URLs (or that the page is not
# built), after the line the tests wait for.
serve_until_ready() {  # serve_until_ready SERVE_FILE: prints what serve printed until it was ready
  # A file of its own: an earlier server's 'stop:' line must not be taken for this one's (the
  # signal would then reach the forked shell before it runs chatflow).
  local out
  out=$(mktemp "$work/serve.XXXXXX")
  "$chatflow" serve --config "$1" >"$out" 2>&1 &
  local pid=$!
  for _ in $(seq 200); do grep -q '^  stop:' "$out" && break; sleep 0.1; done
  kill -TERM $pid; wait $pid
  cat "$out"
}
mkdir -p "$work/web"
echo '<!doctype html>' >"$work/web/index.html"
printf 'server:\n  port: 0\n  web_root: %s\npipeline: %s\n' "$work/web" "$PWD/graphs/echo.yaml" >"$work/serve/web.yaml"
serve_until_ready "$work/serve/web.yaml" >"$work/out"
port=$(sed -n 's|.* at http://127.0.0.1:\([0-9]*\)/v1$|\1|p' "$work/out" | head -1)
check "serve prints the chat page's full URL" grep -qx "  chat page: http://127.0.0.1:$port/" "$work/out"
check "serve prints the dashboard's full URL" grep -qx "  dashboard: http://127.0.0.1:$port/dashboard" "$work/out"
check "... after the ready line" test "$(grep -n 'chatflow: serving pipeline' "$work/out" | cut -d: -f1)" -lt "$(grep -n 'chat page:' "$work/out" | cut -d: -f1)"
printf 'server:\n  port: 0\n  web_root: %s\npipeline: %s\n' "$work/no-web" "$PWD/graphs/echo.yaml" >"$work/serve/no-web.yaml"
serve_until_ready "$work/serve/no-web.yaml" >"$work/out"
check "serve says when the chat page is not built" grep -qx "  chat page: not built (GET / says how to build it; the API works without it)" "$work/out"
printf 'server:\n  port: 0\n  web_root: %s\npipeline: %s\n' "$work/web" "$PWD/graphs/chat.yaml" >"$work/serve/auth.yaml"
CHATFLOW_MODEL="$work/model.gguf" CHATFLOW_KEYS_FILE="$work/serve-keys.yaml" CHATFLOW_USAGE_DB="$work/serve-usage.db" \
  CHATFLOW_HISTORY_DB="$work/serve-history.db" CHATFLOW_DOCUMENTS_INDEX="$work/serve-documents-index" \
  serve_until_ready "$work/serve/auth.yaml" >"$work/out"
check "with auth, the chat page says which key signs in" grep -qE "^  chat page: http://127.0.0.1:[0-9]+/  \(sign in with the key in the curl line below\)$" "$work/out"
check "... and the dashboard asks for an admin key" grep -qE "^  dashboard: http://127.0.0.1:[0-9]+/dashboard  \(sign in with an admin key\)$" "$work/out"

# usage errors
"$chatflow" >/dev/null 2>&1; rc=$?
check "no subcommand is a usage error" test $rc -eq 2
# bench-kernels: one table row per (rows, tokens) pair; a type without an integer kernel is refused.
"$chatflow" bench-kernels --type q4_k --rows 16 --columns 512 --tokens 1,3 --seconds 0.01 >"$work/out"; rc=$?
check "bench-kernels exits 0" test $rc -eq 0
check "bench-kernels measures both token counts" test "$(grep -cE '^\| 16 \| [0-9.]+ \| (1|3) \| [0-9.]+ \| [0-9.]+ \|$' "$work/out")" -eq 2
"$chatflow" bench-kernels --type f16 2>"$work/err"; rc=$?
check "bench-kernels refuses f16" test $rc -eq 1
check "bench-kernels names the types it takes" grep -q "not a type with an integer kernel" "$work/err"

"$chatflow" run graphs/echo.yaml >/dev/null 2>&1; rc=$?
check "missing --prompt is a usage error" test $rc -eq 2

echo "$passes passed, $failures failed"
test $failures -eq 0
