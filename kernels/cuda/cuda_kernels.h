// The CUDA kernels' host side, callable from plain C++ (no CUDA header here): what device is
// visible, and the kernels as host functions over device or host buffers. Built only where nvcc
// is found (CHATFLOW_CUDA, kernels/CMakeLists.txt), into chatflow_cuda_kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/tensor_type.h"

namespace chatflow::kernels::cuda {

struct DeviceProbe {
  int devices = 0;             // 0 when no driver, no device, or a driver older than the runtime
  std::string name;            // of device 0
  int compute_capability = 0;  // of device 0: 90 for sm_90
  size_t free_bytes = 0;       // of device 0
  size_t total_bytes = 0;      // of device 0
  std::string why_none;        // the CUDA runtime's reason when devices == 0
};

DeviceProbe probe_devices();

// Decodes `values` values of a row stored as `type` on device 0, one thread per value, and
// returns them; `error` says what failed (no device, an undecodable type, a CUDA error) when the
// result is empty.
std::vector<float> dequantize_on_device(TensorType type, const uint8_t* row, int64_t values,
                                        std::string& error);

// Device 0's memory read rate in GB/s (the best of five passes over 2 GiB), or 0 with `error`
// saying what failed.
double measure_read_bandwidth(std::string& error);

}  // namespace chatflow::kernels::cuda
