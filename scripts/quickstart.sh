#!/usr/bin/env bash
# One entry point for a fresh Debian 12 machine: installs what is missing, builds, and runs.
#
#   scripts/quickstart.sh run            build (Release) and serve the default pipeline on
#                                        http://127.0.0.1:8000 (CHATFLOW_PORT to change)
#   scripts/quickstart.sh test           build (Release) and run the test suite (what CI runs)
#   scripts/quickstart.sh test-long      the long tests: 64 clients x 30 s load, twice; reloads x 20
#   scripts/quickstart.sh test-llama-cpp the parity tests against llama.cpp (LLAMA_CPP_BIN: its bin folder)
#   scripts/quickstart.sh test-sanitize  the whole suite under AddressSanitizer + UBSan
#   scripts/quickstart.sh test-tsan      the whole suite under ThreadSanitizer
#   scripts/quickstart.sh fuzz [SECONDS] the libFuzzer targets (GGUF reader, tokenizers, YAML files,
#                                        HTTP requests, quantised blocks, Jinja templates, JSON
#                                        Schemas), 180 s each
#   scripts/quickstart.sh build          install and build only
#   scripts/quickstart.sh path           put build/chatflow on PATH only (run and build do it too)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
jobs=${CHATFLOW_JOBS:-$(nproc)}

packages=(
  build-essential cmake ninja-build pkg-config git curl ca-certificates
  libtbb-dev libyaml-cpp-dev libboost1.81-dev libboost-json1.81-dev libre2-dev libhnswlib-dev
  libcli11-dev libgtest-dev libutf8proc-dev libspdlog-dev libssl-dev libsqlite3-dev graphviz
  libxapian-dev python3-jinja2 zlib1g-dev
  # The redis resource's client (hiredis); redis-server for the tests that start their own.
  libhiredis-dev redis-server
  # The postgres resource (usage ledger, session history) links libpq; its tests start their
  # own PostgreSQL server from Debian's package in a temporary directory.
  libpq-dev postgresql
)
# The server tests drive it with Node.js and the official openai npm client; the chat page and
# dashboard are built with it (Node 18.19 or later: Debian 12's nodejs will do). A node from
# elsewhere (nodesource, nvm) is used as it is: Debian's npm package would conflict with it.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then packages+=(nodejs npm); fi
if [ "${1:-}" = "fuzz" ]; then packages+=(clang libclang-rt-dev); fi
# The chat page's and dashboard's browser tests drive Debian's chromium (only the tests need it).
# The fleet and upstream tests put Debian's nginx (with a certificate openssl makes) in front of
# replicas and engines.
case "${1:-run}" in test*) packages+=(chromium nginx openssl) ;; esac

install_missing_packages() {
  local missing=()
  for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "quickstart: installing ${missing[*]}"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "quickstart: run as root (or install sudo) to install: ${missing[*]}" >&2; exit 1; }
    sudo=sudo
  fi
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

build() {  # build DIR CMAKE_ARGS...
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja "$@"
  cmake --build "$dir" -j "$jobs"
}

# ThreadSanitizer only sees synchronisation in instrumented code, and Debian's libtbb is not:
# every hand-off between TBB threads would be reported as a race. So the TSan build uses a
# oneTBB built with TSan from Debian's own source package of the same version (a few seconds).
tsan_onetbb() {
  local prefix="$repo/build-tsan/onetbb"
  [ -f "$prefix/lib/cmake/TBB/TBBConfig.cmake" ] && return 0
  if ! apt-get source --print-uris onetbb >/dev/null 2>&1; then
    echo "quickstart: enabling Debian source packages (deb-src) to build oneTBB with TSan"
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo=sudo
    printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' |
      $sudo tee /etc/apt/sources.list.d/chatflow-deb-src.sources >/dev/null
    $sudo apt-get update -qq
  fi
  local work
  work=$(mktemp -d)
  (cd "$work" && apt-get source -qq onetbb)
  cmake -S "$work"/onetbb-*/ -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTBB_TEST=OFF -DTBB_EXAMPLES=OFF -DTBB_STRICT=OFF -DTBBMALLOC_BUILD=OFF -DTBB_SANITIZE=thread \
    -DCMAKE_INSTALL_PREFIX="$prefix"
  cmake --build "$work/build" -j "$jobs"
  cmake --install "$work/build"
  rm -rf "$work"
}

# The default model, in the order chatflow itself looks: $CHATFLOW_MODEL, models/ in the checkout,
# ../shared/models/stories260K/; otherwise stories260K is downloaded from its public home and
# checked against its published sha256.
stories_url="https://huggingface.co/ggml-org/models/resolve/main/tinyllamas/stories260K.gguf"
stories_sha256="270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d"
ensure_model() {
  if [ -n "${CHATFLOW_MODEL:-}" ]; then
    [ -f "$CHATFLOW_MODEL" ] && return 0
    echo "quickstart: CHATFLOW_MODEL=$CHATFLOW_MODEL does not exist" >&2
    exit 1
  fi
  if ls models/*.gguf >/dev/null 2>&1 || [ -f ../shared/models/stories260K/stories260K.gguf ]; then return 0; fi
  echo "quickstart: no model found; downloading stories260K (1.2 MB) into models/"
  mkdir -p models
  if curl -fsSL --max-time 60 -o models/stories260K.gguf.part "$stories_url" &&
     echo "$stories_sha256  models/stories260K.gguf.part" | sha256sum -c --quiet; then
    mv models/stories260K.gguf.part models/stories260K.gguf
    return 0
  fi
  rm -f models/stories260K.gguf.part
  cat >&2 <<MESSAGE
quickstart: could not download $stories_url
  (no network access to Hugging Face, or the file changed). Fetch that file by other means, check
  that its sha256 is $stories_sha256,
  and put it at models/stories260K.gguf, or point CHATFLOW_MODEL at any llama or qwen2 GGUF file.
MESSAGE
  exit 1
}

# `chatflow` by name after a build: a symlink to build/chatflow in /usr/local/bin when run as root,
# else in ~/.local/bin when that is on PATH (CHATFLOW_BIN_DIR picks another folder); otherwise,
# or where a chatflow that is not a symlink is already there (left alone), the export line to use.
put_on_path() {
  local target="$repo/build/chatflow" dir=${CHATFLOW_BIN_DIR:-}
  if [ ! -x "$target" ]; then
    echo "quickstart: $target does not exist; build it first (scripts/quickstart.sh build)" >&2
    return 1
  fi
  if [ -z "$dir" ]; then
    if [ "$(id -u)" -eq 0 ]; then
      dir=/usr/local/bin
    elif [[ ":$PATH:" == *":$HOME/.local/bin:"* ]]; then
      dir=$HOME/.local/bin
    fi
  fi
  if [ -n "$dir" ] && { [ -L "$dir/chatflow" ] || [ ! -e "$dir/chatflow" ]; } &&
     mkdir -p "$dir" 2>/dev/null && ln -sfn "$target" "$dir/chatflow" 2>/dev/null; then
    echo "quickstart: $dir/chatflow -> $target"
    [[ ":$PATH:" == *":$dir:"* ]] && return 0
  elif [ -n "$dir" ] && [ -e "$dir/chatflow" ]; then
    echo "quickstart: $dir/chatflow is not a symlink; left as it is"
  fi
  echo "quickstart: to run chatflow by name: export PATH=\"$repo/build:\$PATH\""
}

run_tests() {  # run_tests DIR
  ctest --test-dir "$1" --output-on-failure -j "$jobs" -LE long
}

command=${1:-run}
if [ "$command" = path ]; then
  put_on_path
  exit
fi
install_missing_packages
case "$command" in
  build)
    build build -DCMAKE_BUILD_TYPE=Release
    put_on_path
    ;;
  run)
    build build -DCMAKE_BUILD_TYPE=Release
    put_on_path
    ensure_model
    echo "quickstart: chatflow serve --config configs/default.yaml"
    exec ./build/chatflow serve --config configs/default.yaml
    ;;
  test)
    build build -DCMAKE_BUILD_TYPE=Release
    run_tests build
    ;;
  test-long)
    build build -DCMAKE_BUILD_TYPE=Release
    ctest --test-dir build --output-on-failure -L long
    ;;
  test-llama-cpp)
    if [ -z "${LLAMA_CPP_BIN:-}" ]; then
      echo "quickstart: set LLAMA_CPP_BIN to the bin folder of llama.cpp b4748 (docs/development.md says how to build it)" >&2
      exit 2
    fi
    build build -DCMAKE_BUILD_TYPE=Release
    ctest --test-dir build --output-on-failure -L llama_cpp
    ;;
  test-sanitize)
    build build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHATFLOW_SANITIZE=ON
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 run_tests build-asan
    ;;
  test-tsan)
    tsan_onetbb
    build build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHATFLOW_TSAN=ON -DTBB_DIR="$repo/build-tsan/onetbb/lib/cmake/TBB"
    TSAN_OPTIONS="halt_on_error=1:detect_deadlocks=0:suppressions=$repo/scripts/tsan.supp" run_tests build-tsan
    ;;
  fuzz)
    seconds=${2:-180}
    CC=clang CXX=clang++ build build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHATFLOW_FUZZ=ON \
      -DCHATFLOW_BUILD_TESTS=OFF -DCHATFLOW_CUDA=OFF
    build build -DCMAKE_BUILD_TYPE=Release
    corpus=build-fuzz/corpus
    mkdir -p "$corpus/gguf" "$corpus/tokenizer" "$corpus/yaml" "$corpus/http" "$corpus/blocks" "$corpus/jinja"
    ./build/chatflow make-model --dim 32 --layers 1 --heads 2 --ffn 64 -o "$corpus/gguf/llama-f32.gguf" >/dev/null
    ./build/chatflow make-model --arch qwen2 --dim 32 --layers 1 --heads 2 --ffn 64 --type q4_0 \
      -o "$corpus/gguf/qwen2-q4_0.gguf" >/dev/null
    ./build/chatflow make-model --dim 256 --layers 1 --heads 2 --ffn 256 --type q4_k_m \
      -o "$corpus/gguf/llama-q4_k_m.gguf" >/dev/null
    head -c 1200 /dev/urandom > "$corpus/blocks/random"
    cp README.md "$corpus/tokenizer/"
    if ls ../shared/models/vocab/*.inp >/dev/null 2>&1; then cp ../shared/models/vocab/*.inp "$corpus/tokenizer/"; fi
    cp graphs/*.yaml configs/*.yaml "$corpus/yaml/"
    printf 'keys:\n  - {id: k_1, sha256: %064d, tenant: acme, user: a, roles: [admin]}\nx: &a [*a]\n' 0 \
      > "$corpus/yaml/keys.yaml"
    printf 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 71\r\n\r\n{"model": "fuzz-model", "messages": [{"role": "user", "content": "hi"}]}' \
      > "$corpus/http/chat.http"
    printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2;ext=1\r\n{}\r\n0\r\n\r\n' \
      > "$corpus/http/chunked.http"
    printf 'GET http://h/v1/models/m?x=1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n' \
      > "$corpus/http/absolute.http"
    ./build-fuzz/tests/fuzz/fuzz_gguf -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=4096 "$corpus/gguf"
    ./build-fuzz/tests/fuzz/fuzz_tokenizer -max_total_time="$seconds" -max_len=4096 -rss_limit_mb=4096 "$corpus/tokenizer"
    ./build-fuzz/tests/fuzz/fuzz_yaml -max_total_time="$seconds" -max_len=16384 -rss_limit_mb=4096 -timeout=10 "$corpus/yaml"
    ./build-fuzz/tests/fuzz/fuzz_http_request -max_total_time="$seconds" -max_len=16384 -rss_limit_mb=4096 -timeout=10 "$corpus/http"
    ./build-fuzz/tests/fuzz/fuzz_quant_blocks -max_total_time="$seconds" -max_len=14000 -rss_limit_mb=4096 "$corpus/blocks"
    # Seeded with the real chat templates beside the checkout, when present.
    if ls ../shared/models/templates/*.jinja >/dev/null 2>&1; then cp ../shared/models/templates/*.jinja "$corpus/jinja/"; fi
    printf '{%% for m in messages %%}{{ m.role | upper }}: {{ m.content | trim }}{%% endfor %%}' > "$corpus/jinja/seed.jinja"
    ./build-fuzz/tests/fuzz/fuzz_jinja -max_total_time="$seconds" -max_len=16384 -rss_limit_mb=4096 -timeout=10 "$corpus/jinja"
    mkdir -p "$corpus/json_schema"
    printf '{"type":"object","properties":{"a":{"type":"string","pattern":"^[a-z]+$"},"n":{"type":"integer","minimum":-5,"maximum":70}},"required":["a"]}' \
      > "$corpus/json_schema/object.json"
    printf '{"$defs":{"t":{"type":"array","items":{"anyOf":[{"$ref":"#/$defs/t"},{"enum":[1,"x",null]}]}}},"$ref":"#/$defs/t"}' \
      > "$corpus/json_schema/tree.json"
    ./build-fuzz/tests/fuzz/fuzz_json_schema -max_total_time="$seconds" -max_len=8192 -rss_limit_mb=4096 -timeout=10 "$corpus/json_schema"
    ;;
  *)
    echo "usage: scripts/quickstart.sh [run|test|test-long|test-llama-cpp|test-sanitize|test-tsan|fuzz [SECONDS]|build|path]" >&2
    exit 2
    ;;
esac
