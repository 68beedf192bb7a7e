#include "kernels/tensor_type.h"

#include <algorithm>
#include <array>
#include <cctype>

namespace chatflow::kernels {
namespace {

struct Layout {
  uint32_t id;
  std::string_view name;
  int64_t values;
  size_t bytes;
  bool computable;
};

// ggml's block sizes (ggml-common.h); ids 4, 5 and 31-33 were retired from GGUF files.
constexpr std::array<Layout, 31> kLayouts = {{
    {0, "f32", 1, 4, true},          {1, "f16", 1, 2, true},
    {2, "q4_0", 32, 18, true},       {3, "q4_1", 32, 20, true},
    {6, "q5_0", 32, 22, true},       {7, "q5_1", 32, 24, true},
    {8, "q8_0", 32, 34, true},       {9, "q8_1", 32, 36, false},
    {10, "q2_k", 256, 84, true},     {11, "q3_k", 256, 110, true},
    {12, "q4_k", 256, 144, true},    {13, "q5_k", 256, 176, true},
    {14, "q6_k", 256, 210, true},    {15, "q8_k", 256, 292, false},
    {16, "iq2_xxs", 256, 66, false}, {17, "iq2_xs", 256, 74, false},
    {18, "iq3_xxs", 256, 98, false}, {19, "iq1_s", 256, 50, false},
    {20, "iq4_nl", 32, 18, true},    {21, "iq3_s", 256, 110, false},
    {22, "iq2_s", 256, 82, false},   {23, "iq4_xs", 256, 136, true},
    {24, "i8", 1, 1, false},         {25, "i16", 1, 2, false},
    {26, "i32", 1, 4, false},        {27, "i64", 1, 8, false},
    {28, "f64", 1, 8, false},        {29, "iq1_m", 256, 56, false},
    {30, "bf16", 1, 2, true},        {34, "tq1_0", 256, 54, false},
    {35, "tq2_0", 256, 66, false},
}};

// Each id's place in kLayouts (-1: no layout): the per-block questions below sit in kernels'
// loops, so they index rather than search.
constexpr uint32_t kIdCount = 36;
constexpr std::array<int8_t, kIdCount> kLayoutIndex = [] {
  std::array<int8_t, kIdCount> index{};
  index.fill(-1);
  for (size_t i = 0; i < kLayouts.size(); ++i)
    index[kLayouts[i].id] = static_cast<int8_t>(i);
  return index;
}();

const Layout* find_layout(uint32_t id) {
  if (id >= kIdCount || kLayoutIndex[id] < 0) return nullptr;
  return &kLayouts[static_cast<size_t>(kLayoutIndex[id])];
}

const Layout& layout_of(TensorType type) {
  // Every enumerator has a layout, so this never fails for a value made by tensor_type_from_id.
  return *find_layout(static_cast<uint32_t>(type));
}

}  // namespace

std::optional<TensorType> tensor_type_from_id(uint32_t id) {
  if (!find_layout(id)) return std::nullopt;
  return static_cast<TensorType>(id);
}

std::string_view tensor_type_name(uint32_t id) {
  const Layout* layout = find_layout(id);
  return layout ? layout->name : std::string_view("unknown");
}

std::string_view to_string(TensorType type) {
  return layout_of(type).name;
}

std::optional<TensorType> tensor_type_from_name(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const Layout& layout : kLayouts) {
    if (layout.computable && layout.name == lower) return static_cast<TensorType>(layout.id);
  }
  return std::nullopt;
}

bool computable(TensorType type) {
  return layout_of(type).computable;
}

std::string computable_type_names() {
  std::string names;
  for (const Layout& layout : kLayouts) {
    if (!layout.computable) continue;
    if (!names.empty()) names += ", ";
    names += layout.name;
  }
  return names;
}

bool is_quantized(TensorType type) {
  return layout_of(type).values > 1;
}

int64_t block_values(TensorType type) {
  return layout_of(type).values;
}

size_t block_bytes(TensorType type) {
  return layout_of(type).bytes;
}

size_t row_bytes(TensorType type, int64_t values) {
  return static_cast<size_t>(values / block_values(type)) * block_bytes(type);
}

}  // namespace chatflow::kernels
