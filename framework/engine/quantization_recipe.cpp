#include "framework/engine/quantization_recipe.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <stdexcept>

namespace chatflow::engine {
namespace {

using kernels::TensorType;

constexpr std::array<std::pair<std::string_view, std::pair<TensorType, uint32_t>>, 19> kRecipes = {{
    {"f32", {TensorType::f32, 0}},        {"f16", {TensorType::f16, 1}},
    {"bf16", {TensorType::bf16, 32}},     {"q4_0", {TensorType::q4_0, 2}},
    {"q4_1", {TensorType::q4_1, 3}},      {"q5_0", {TensorType::q5_0, 8}},
    {"q5_1", {TensorType::q5_1, 9}},      {"q8_0", {TensorType::q8_0, 7}},
    {"q2_k", {TensorType::q2_k, 10}},     {"q3_k_s", {TensorType::q3_k, 11}},
    {"q3_k_m", {TensorType::q3_k, 12}},   {"q3_k_l", {TensorType::q3_k, 13}},
    {"q4_k_s", {TensorType::q4_k, 14}},   {"q4_k_m", {TensorType::q4_k, 15}},
    {"q5_k_s", {TensorType::q5_k, 16}},   {"q5_k_m", {TensorType::q5_k, 17}},
    {"q6_k", {TensorType::q6_k, 18}},     {"iq4_nl", {TensorType::iq4_nl, 25}},
    {"iq4_xs", {TensorType::iq4_xs, 30}},
}};

bool has(const std::string& name, std::string_view part) {
  return name.find(part) != std::string::npos;
}

// blk.N. -> N, else -1.
int64_t layer_of(const std::string& name) {
  int layer = -1;
  if (std::sscanf(name.c_str(), "blk.%d.", &layer) != 1) return -1;
  return layer;
}

// The layers where the medium mixes spend more bits: the first and last eighth, and every third
// layer between.
bool more_bits(int64_t layer, int64_t layers) {
  return layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2;
}

TensorType mixed_type(const QuantizationRecipe& recipe, const RecipeModel& model,
                      const std::string& name) {
  const std::string& r = recipe.name;
  const TensorType base = recipe.base;
  const int64_t layer = layer_of(name);
  const int64_t layers = model.layers;
  const bool iq4 = base == TensorType::iq4_nl || base == TensorType::iq4_xs;
  if (name == "output.weight" || (!model.has_output && name == "token_embd.weight")) {
    return base == TensorType::q8_0 ? base : TensorType::q6_k;  // fitting() takes q8_0 for
                                                                // rows not of 256
  }
  if (name == "token_embd.weight") return base;
  if (has(name, "attn_v.weight")) {
    if (r == "q2_k") return model.query_groups >= 4 ? TensorType::q4_k : TensorType::q3_k;
    if (r == "q3_k_m") return layer < 2 ? TensorType::q5_k : TensorType::q4_k;
    if (r == "q3_k_l") return TensorType::q5_k;
    if (iq4 && model.query_groups >= 4) return TensorType::q5_k;
    if ((r == "q4_k_m" || r == "q5_k_m") && more_bits(layer, layers)) return TensorType::q6_k;
    if (r == "q4_k_s" && layer < 4) return TensorType::q5_k;
    return base;
  }
  if (has(name, "ffn_down")) {
    if (r == "q2_k") return TensorType::q3_k;
    if (r == "q3_k_m") return layer < layers / 16 ? TensorType::q5_k : TensorType::q4_k;
    if (r == "q3_k_l") return TensorType::q5_k;
    if (r == "q4_k_m") return more_bits(layer, layers) ? TensorType::q6_k : base;
    if (iq4 && layer < layers / 8) return TensorType::q5_k;
    if (r == "q5_k_m" && more_bits(layer, layers)) return TensorType::q6_k;
    if (r == "q4_k_s" && layer < layers / 8) return TensorType::q5_k;
    return base;
  }
  if (has(name, "attn_qkv.weight")) {  // phi3's fused projection
    if (r == "q3_k_m" || r == "q3_k_l") return TensorType::q4_k;
    if (r == "q4_k_m") return TensorType::q5_k;
    if (r == "q5_k_m") return TensorType::q6_k;
    return base;
  }
  if (has(name, "attn_output.weight")) {
    if (r == "q2_k") return TensorType::q3_k;
    if (r == "q3_k_m") return TensorType::q4_k;
    if (r == "q3_k_l") return TensorType::q5_k;
  }
  return base;
}

// As llama-quantize does: a row that is not a whole number of 256-value blocks takes the
// nearest 32-value format, else f16; a 32-value format asked for by name has no stand-in.
TensorType fitting(TensorType type, const std::string& name, int64_t columns) {
  if (columns % kernels::block_values(type) == 0) return type;
  switch (type) {
    case TensorType::q2_k:
    case TensorType::q3_k:
    case TensorType::iq4_xs:
      type = TensorType::iq4_nl;
      break;
    case TensorType::q4_k:
      type = TensorType::q5_0;
      break;
    case TensorType::q5_k:
      type = TensorType::q5_1;
      break;
    case TensorType::q6_k:
      type = TensorType::q8_0;
      break;
    default:
      throw std::invalid_argument(std::string(kernels::to_string(type)) + " needs rows of whole " +
                                  std::to_string(kernels::block_values(type)) +
                                  "-value blocks, but " + name + " has " + std::to_string(columns) +
                                  " values per row");
  }
  return columns % kernels::block_values(type) == 0 ? type : TensorType::f16;
}

}  // namespace

std::optional<QuantizationRecipe> quantization_recipe(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  // llama-quantize's short names for the medium mixes.
  if (lower == "q3_k" || lower == "q4_k" || lower == "q5_k") lower += "_m";
  for (const auto& [recipe_name, spec] : kRecipes) {
    if (recipe_name == lower) return QuantizationRecipe{lower, spec.first, spec.second};
  }
  return std::nullopt;
}

std::string quantization_recipe_names() {
  std::string names;
  for (const auto& entry : kRecipes) {
    if (!names.empty()) names += ", ";
    names += entry.first;
  }
  return names;
}

std::optional<kernels::TensorType> recipe_tensor_type(const QuantizationRecipe& recipe,
                                                      const RecipeModel& model,
                                                      const std::string& name, int64_t columns,
                                                      int64_t dimensions) {
  // As llama-quantize: norms, and a mixture of experts' router, keep their type.
  const bool matrix = dimensions >= 2 && name.size() > 6 &&
                      name.compare(name.size() - 6, 6, "weight") == 0 && !has(name, "_norm.") &&
                      !has(name, "ffn_gate_inp.weight");
  if (!matrix) return std::nullopt;
  if (!kernels::is_quantized(recipe.base)) return recipe.base;
  return fitting(mixed_type(recipe, model, name), name, columns);
}

}  // namespace chatflow::engine
