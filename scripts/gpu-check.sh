#!/usr/bin/env bash
# The GPU checks, in one command for a machine with an NVIDIA GPU and the CUDA Toolkit:
#  1. builds chatflow and chatflow_cuda_tests in build-cuda/ (Release, -DCHATFLOW_CUDA=ON), or
#     uses a build carried along (CHATFLOW_CUDA_BUILD=DIR holding chatflow and
#     tests/chatflow_cuda_tests, built on another machine with the same toolkit);
#  2. runs the `cuda` label: the block decoders, the backend conformance suite on the CUDA
#     backend, greedy text against the CPU backend, 1,000 requests without a leak, the memory
#     plan's refusal; and compute-sanitizer over a short run when the toolkit has it;
#  3. measures with `chatflow bench-engine --backend cuda` make-model files of the 1B Llama
#     shape (f16 and q4_k_m) and, with GPU_CHECK_8B=1, of the 8B shape (bf16 and q4_k_m);
#  4. serves the 1B q4_k_m file through `chatflow serve` and loads it with 64 streams
#     (`chatflow bench`).
# Everything goes to one folder: $OUT (the device tool's), else build-cuda/gpu-check/. It fails
# when no device is visible: a skipped GPU test is not a passed one here.
#
#   scripts/gpu-check.sh [JOBS]
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
jobs="${1:-$(nproc)}"
out="${OUT:-$repo/build-cuda/gpu-check}"
mkdir -p "$out"
{
  nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv || true
  /usr/local/cuda/bin/nvcc --version | tail -1 || true
} > "$out/device.txt" 2>&1
cat "$out/device.txt"

build="${CHATFLOW_CUDA_BUILD:-}"
if [ -z "$build" ]; then
  build="$repo/build-cuda"
  cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCHATFLOW_CUDA=ON \
    -DCHATFLOW_WEB=OFF > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
  cmake --build "$build" -j "$jobs" --target chatflow chatflow_cuda_tests > "$out/build.log" 2>&1 ||
    { tail -30 "$out/build.log"; exit 1; }
fi
chatflow="$build/chatflow"
status=0

# 2. The tests.
(cd "$build" && ctest -L cuda --output-on-failure -j 4 > "$out/ctest.log" 2>&1) || status=$?
tail -40 "$out/ctest.log"
if grep -q "Skipped" "$out/ctest.log" && ! grep -q "0 tests skipped" "$out/ctest.log"; then
  echo "gpu-check: GPU tests were skipped: no CUDA device is visible here" >&2
  exit 1
fi
if [ -x /usr/local/cuda/bin/compute-sanitizer ]; then
  /usr/local/cuda/bin/compute-sanitizer --tool memcheck --leak-check full --error-exitcode 3 \
    "$build/tests/chatflow_cuda_tests" --gtest_filter='CudaBackend.Greedy*' \
    > "$out/compute-sanitizer.log" 2>&1 || status=$?
  tail -5 "$out/compute-sanitizer.log"
fi

# 3. Speed on realistic shapes (random weights: speed does not depend on their values).
models="$out/models"
mkdir -p "$models"
make_model() {  # NAME TYPE make-model-options...
  local name=$1 type=$2
  shift 2
  [ -f "$models/$name-f16.gguf" ] ||
    "$chatflow" make-model "$@" --type f16 --output "$models/$name-f16.gguf" > /dev/null
  if [ "$type" != f16 ] && [ ! -f "$models/$name-$type.gguf" ]; then
    "$chatflow" quantize "$models/$name-f16.gguf" "$models/$name-$type.gguf" "$type" > /dev/null
  fi
}
vocabulary=()  # Llama's 32,000-token vocabulary where ../shared has it, else make-model's own
for candidate in "$repo/../shared" "$repo/shared"; do
  if [ -f "$candidate/models/vocab/ggml-vocab-llama-spm.gguf" ]; then
    vocabulary=(--vocab-from "$candidate/models/vocab/ggml-vocab-llama-spm.gguf")
    break
  fi
done
one_b=(--dim 2048 --layers 16 --heads 32 --kv-heads 8 --ffn 8192 --context 4096 "${vocabulary[@]}")
make_model llama1b f16 "${one_b[@]}"
make_model llama1b q4_k_m "${one_b[@]}"
files=("$models/llama1b-f16.gguf" "$models/llama1b-q4_k_m.gguf")
if [ "${GPU_CHECK_8B:-0}" = 1 ]; then
  eight_b=(--dim 4096 --layers 32 --heads 32 --kv-heads 8 --ffn 14336 --context 8192
    "${vocabulary[@]}")
  make_model llama8b bf16 "${eight_b[@]}"
  make_model llama8b q4_k_m "${eight_b[@]}"
  files+=("$models/llama8b-bf16.gguf" "$models/llama8b-q4_k_m.gguf")
fi
for file in "${files[@]}"; do
  echo "== bench-engine --backend cuda $(basename "$file")" | tee -a "$out/bench-engine.txt"
  "$chatflow" bench-engine "$file" --backend cuda --threads 1 --repetitions 3 \
    >> "$out/bench-engine.txt" 2>&1 || status=$?
done
tail -30 "$out/bench-engine.txt"

# 4. Serving 64 streams.
CHATFLOW_MODEL="$models/llama1b-q4_k_m.gguf" "$chatflow" serve \
  --pipeline "$repo/graphs/minimal.yaml" --port 18631 --access-log off > "$out/serve.log" 2>&1 &
server=$!
for _ in $(seq 1 240); do
  curl -sf http://127.0.0.1:18631/health > /dev/null && break
  sleep 0.5
done
"$chatflow" bench --url http://127.0.0.1:18631 --endpoint completions --concurrency 64 \
  --max-tokens 128 --requests 256 --temperature 0 > "$out/serve-bench.txt" 2>&1 || status=$?
kill -INT "$server"
wait "$server" 2> /dev/null || true
tail -25 "$out/serve-bench.txt"
exit "$status"
