// Weights as floats on the device, through the decoders the host tests check bit for bit
// (block_decode.h). The backend uses this for the types it has no fused kernel for, and the GPU
// tests use it to show that a block reads the same on the device as on the CPU.
#include <cuda_runtime.h>
#include <string>
#include <vector>

#include "kernels/cuda/block_decode.h"
#include "kernels/cuda/cuda_kernels.h"

namespace chatflow::kernels::cuda {
namespace {

__global__ void dequantize_kernel(TensorType type, const uint8_t* row, int64_t values, float* out) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index < values) out[index] = decode_value(type, row, index);
}

// A device buffer freed on every path out.
template <typename T>
struct DeviceBuffer {
  T* data = nullptr;
  ~DeviceBuffer() {
    if (data) cudaFree(data);
  }
};

bool failed(cudaError_t status, const char* what, std::string& error) {
  if (status == cudaSuccess) return false;
  error = std::string(what) + ": " + cudaGetErrorString(status);
  return true;
}

}  // namespace

DeviceProbe probe_devices() {
  DeviceProbe probe;
  int count = 0;
  if (cudaError_t status = cudaGetDeviceCount(&count); status != cudaSuccess) {
    probe.why_none = cudaGetErrorString(status);
    cudaGetLastError();  // the error is reported here, not left for the next call
    return probe;
  }
  if (count == 0) {
    probe.why_none = "no CUDA device is visible";
    return probe;
  }
  cudaDeviceProp properties{};
  if (cudaGetDeviceProperties(&properties, 0) != cudaSuccess) {
    probe.why_none = "device 0's properties cannot be read";
    return probe;
  }
  probe.devices = count;
  probe.name = properties.name;
  probe.compute_capability = properties.major * 10 + properties.minor;
  cudaSetDevice(0);
  cudaMemGetInfo(&probe.free_bytes, &probe.total_bytes);
  return probe;
}

std::vector<float> dequantize_on_device(TensorType type, const uint8_t* row, int64_t values,
                                        std::string& error) {
  const int block_values = decoded_block_values(type);
  if (block_values == 0 || values <= 0 || values % block_values != 0) {
    error = "cannot decode " + std::to_string(values) + " values of type " +
            std::string(to_string(type)) + " on the device";
    return {};
  }
  const size_t bytes =
      static_cast<size_t>(values / block_values) * static_cast<size_t>(decoded_block_bytes(type));
  DeviceBuffer<uint8_t> device_row;
  DeviceBuffer<float> device_out;
  if (failed(cudaMalloc(&device_row.data, bytes), "cudaMalloc", error) ||
      failed(cudaMalloc(&device_out.data, static_cast<size_t>(values) * sizeof(float)),
             "cudaMalloc", error) ||
      failed(cudaMemcpy(device_row.data, row, bytes, cudaMemcpyHostToDevice), "cudaMemcpy",
             error)) {
    return {};
  }
  const int threads = 256;
  const auto blocks = static_cast<unsigned>((values + threads - 1) / threads);
  dequantize_kernel<<<blocks, threads>>>(type, device_row.data, values, device_out.data);
  if (failed(cudaGetLastError(), "dequantize_kernel launch", error) ||
      failed(cudaDeviceSynchronize(), "dequantize_kernel", error)) {
    return {};
  }
  std::vector<float> out(static_cast<size_t>(values));
  if (failed(cudaMemcpy(out.data(), device_out.data, out.size() * sizeof(float),
                        cudaMemcpyDeviceToHost),
             "cudaMemcpy", error)) {
    return {};
  }
  return out;
}

}  // namespace chatflow::kernels::cuda
