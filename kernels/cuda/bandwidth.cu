// The device's memory read rate, the roofline decode is measured against: a kernel that sums a
// buffer far larger than the L2 cache, each thread reading 16 bytes at a time.
#include <cuda_runtime.h>
#include <string>

#include "kernels/cuda/cuda_kernels.h"

namespace chatflow::kernels::cuda {
namespace {

__global__ void read_kernel(const float4* data, size_t count, float* sink) {
  float sum = 0;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float4 value = data[i];
    sum += value.x + value.y + value.z + value.w;
  }
  if (sum == 12345.0f) *sink = sum;  // never true for a zeroed buffer: keeps the reads
}

}  // namespace

double measure_read_bandwidth(std::string& error) {
  constexpr size_t kBytes = size_t{2} << 30;
  float4* data = nullptr;
  float* sink = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  auto fail = [&](cudaError_t status, const char* what) {
    error = std::string(what) + ": " + cudaGetErrorString(status);
    cudaGetLastError();
    return 0.0;
  };
  double rate = 0;
  if (cudaError_t status = cudaMalloc(&data, kBytes); status != cudaSuccess)
    return fail(status, "cudaMalloc");
  cudaMalloc(&sink, sizeof(float));
  cudaMemset(data, 0, kBytes);
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  int device = 0, processors = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&processors, cudaDevAttrMultiProcessorCount, device);
  const size_t count = kBytes / sizeof(float4);
  float best_ms = 0;
  for (int run = 0; run < 6; ++run) {  // the first run warms up
    cudaEventRecord(start);
    read_kernel<<<static_cast<unsigned>(processors * 8), 512>>>(data, count, sink);
    cudaEventRecord(stop);
    if (cudaError_t status = cudaEventSynchronize(stop); status != cudaSuccess) {
      fail(status, "read_kernel");
      best_ms = 0;  // no rate beside an error
      break;
    }
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (run > 0 && (best_ms == 0 || ms < best_ms)) best_ms = ms;
  }
  if (best_ms > 0) rate = static_cast<double>(kBytes) / (best_ms * 1e-3) / 1e9;
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(sink);
  cudaFree(data);
  return rate;
}

}  // namespace chatflow::kernels::cuda
