// Quantising a GGUF model into another (`chatflow quantize`): every weight matrix converted as
// the recipe says, every other tensor and all metadata copied, general.file_type set.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "framework/engine/quantization_recipe.h"

namespace chatflow::engine {

struct QuantizeOptions {
  QuantizationRecipe recipe;
  int threads = 1;
  // Matrices already quantised are refused unless this is set (quantising them again loses
  // more than quantising the original once).
  bool allow_requantize = false;
};

struct TensorQuantization {
  std::string name;
  std::vector<int64_t> shape;
  kernels::TensorType from = kernels::TensorType::f32;
  kernels::TensorType to = kernels::TensorType::f32;
  uint64_t bytes_in = 0, bytes_out = 0;
  double rms_error = 0;  // of the written values against the source's (0 when copied)
  double rms = 0;        // of the source's values (when converted)
};

struct QuantizeReport {
  std::vector<TensorQuantization> tensors;
  uint64_t bytes_in = 0, bytes_out = 0;
  int64_t weights = 0;  // values in all tensors
};

// Called after each tensor with its index (from 0) and the number of tensors.
using QuantizeProgress = std::function<void(size_t index, size_t count, const TensorQuantization&)>;

// Throws GgufError for a bad input, std::runtime_error for a refused conversion or an I/O error.
QuantizeReport quantize_model(const std::string& input, const std::string& output,
                              const QuantizeOptions& options,
                              const QuantizeProgress& progress = {});

}  // namespace chatflow::engine
