#!/usr/bin/env bash
# The GPU checks, in one command for a machine with an NVIDIA GPU and the CUDA Toolkit: builds
# what the CUDA tests need in build-cuda/ (Release, -DCHATFLOW_CUDA=ON, only the CUDA targets
# and what they link), runs `ctest -L cuda`, and leaves its logs in $OUT (or build-cuda/gpu-check/).
# It fails when no device is visible: a skipped GPU test is not a passed one here.
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
cmake -S "$repo" -B "$repo/build-cuda" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCHATFLOW_CUDA=ON \
  -DCHATFLOW_WEB=OFF > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build "$repo/build-cuda" -j "$jobs" --target chatflow_cuda_tests > "$out/build.log" 2>&1 ||
  { tail -30 "$out/build.log"; exit 1; }
cd "$repo/build-cuda"
status=0
ctest -L cuda --output-on-failure > "$out/ctest.log" 2>&1 || status=$?
cat "$out/ctest.log" | tail -40
if grep -q "Skipped" "$out/ctest.log"; then
  echo "gpu-check: GPU tests were skipped: no CUDA device is visible here" >&2
  exit 1
fi
exit "$status"
