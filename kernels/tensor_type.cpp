#include "kernels/tensor_type.h"

namespace chatflow::kernels {

std::optional<TensorType> tensor_type_from_id(uint32_t id) {
  switch (id) {
    case 0:
      return TensorType::f32;
    case 1:
      return TensorType::f16;
    case 2:
      return TensorType::q4_0;
    case 8:
      return TensorType::q8_0;
    case 30:
      return TensorType::bf16;
    default:
      return std::nullopt;
  }
}

std::string_view tensor_type_name(uint32_t id) {
  static constexpr std::string_view kNames[] = {
      "f32",     "f16",    "q4_0",    "q4_1",  "q4_2",   "q4_3",  "q5_0",  "q5_1",
      "q8_0",    "q8_1",   "q2_k",    "q3_k",  "q4_k",   "q5_k",  "q6_k",  "q8_k",
      "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s", "iq4_nl", "iq3_s", "iq2_s", "iq4_xs",
      "i8",      "i16",    "i32",     "i64",   "f64",    "iq1_m", "bf16"};
  return id < std::size(kNames) ? kNames[id] : std::string_view("unknown");
}

std::string_view to_string(TensorType type) {
  return tensor_type_name(static_cast<uint32_t>(type));
}

std::optional<TensorType> tensor_type_from_name(std::string_view name) {
  for (TensorType type :
       {TensorType::f32, TensorType::f16, TensorType::bf16, TensorType::q8_0, TensorType::q4_0}) {
    if (to_string(type) == name) return type;
  }
  return std::nullopt;
}

int64_t block_values(TensorType type) {
  return type == TensorType::q4_0 || type == TensorType::q8_0 ? kQuantBlock : 1;
}

size_t block_bytes(TensorType type) {
  switch (type) {
    case TensorType::f32:
      return 4;
    case TensorType::f16:
    case TensorType::bf16:
      return 2;
    case TensorType::q8_0:
      return kQ8BlockBytes;
    case TensorType::q4_0:
      return kQ4BlockBytes;
  }
  return 4;
}

size_t row_bytes(TensorType type, int64_t values) {
  return static_cast<size_t>(values / block_values(type)) * block_bytes(type);
}

}  // namespace chatflow::kernels
