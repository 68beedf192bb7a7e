// The CUDA backend: the step of backend.h on an NVIDIA GPU (device 0). Weights are uploaded once
// in their file's types (types without a device decoder are dequantised to f32 at load, with a
// log line); products of up to kernels::cuda::kMatVecTokens tokens run as fused dequantise-and-
// multiply mat-vec kernels that read each weight once, larger ones as cuBLAS SGEMMs over
// dequantised bands of rows; norms, rotations, activations, residuals, the paged KV pool and
// attention are device kernels (kernels/cuda/transformer_kernels.h). Rotation angles, mixture-of-
// experts routing and the draw of each token are computed on the host by the same code as the
// CPU backend's (step_math.h, sampler.h): the logits rows of tokens to draw are copied back.
// Compiled only where nvcc is found (CHATFLOW_CUDA); the registry (backend_registry.cpp) makes it.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "framework/engine/backend.h"

namespace chatflow::engine {

// Why no CUDA backend can be made on this machine (no driver, no device: the runtime's reason),
// or nullopt when device 0 is there.
std::optional<std::string> cuda_device_missing();

// Throws BackendUnavailable without a device, DeviceOutOfMemory (a std::bad_alloc) naming the
// numbers when the weights do not fit, std::invalid_argument for a model it cannot run.
std::unique_ptr<Backend> make_cuda_backend(std::shared_ptr<const Model> model,
                                           const BackendOptions& options);

}  // namespace chatflow::engine
