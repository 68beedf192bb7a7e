// The quantisation schemes `chatflow quantize` and `make-model --type` take, by llama.cpp's
// names, and which type each tensor gets under them. A mix such as q4_k_m gives more bits to
// the tensors that matter most (the output matrix, half the attention values and feed-forward
// down projections) and falls back to a 32-value format where a row is not a multiple of 256.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kernels/tensor_type.h"

namespace chatflow::engine {

struct QuantizationRecipe {
  std::string name;          // "q4_k_m"
  kernels::TensorType base;  // what most matrices get
  uint32_t file_type;        // general.file_type (llama.cpp's llama_ftype numbering)
};

// By name, any case (q3_k, q4_k and q5_k mean the _m mixes); nullopt for an unknown name.
std::optional<QuantizationRecipe> quantization_recipe(std::string_view name);
std::string quantization_recipe_names();

// The facts about a model the mixes look at.
struct RecipeModel {
  int64_t layers = 1;
  int64_t query_groups = 1;  // attention heads per key/value head
  bool has_output = true;    // an output.weight of its own (else the embedding is tied)
};

// The type of tensor `name` with `columns` values per row (its first dimension) and
// `dimensions` dimensions; nullopt for tensors that keep their type (norms, biases: anything
// but a matrix of weights).
std::optional<kernels::TensorType> recipe_tensor_type(const QuantizationRecipe& recipe,
                                                      const RecipeModel& model,
                                                      const std::string& name, int64_t columns,
                                                      int64_t dimensions);

}  // namespace chatflow::engine
