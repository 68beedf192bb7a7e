#include "kernels/cpu/cpu_kernels.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

namespace chatflow::kernels {

int matmul_index(TensorType type) {
  switch (type) {
    case TensorType::f32:
      return 0;
    case TensorType::f16:
      return 1;
    case TensorType::bf16:
      return 2;
    case TensorType::q8_0:
      return 3;
    case TensorType::q4_0:
      return 4;
  }
  return 0;
}

int packed_index(TensorType type) {
  switch (type) {
    case TensorType::f16:
      return 1;
    case TensorType::bf16:
      return 2;
    default:
      return 0;
  }
}

std::string_view to_string(KvType type) {
  return type == KvType::f16 ? "f16" : "f32";
}

bool packable(TensorType type) {
  return type == TensorType::f32 || type == TensorType::f16 || type == TensorType::bf16;
}

size_t packed_bytes(TensorType type, int64_t rows, int64_t columns) {
  int64_t panels = (rows + kPanelRows - 1) / kPanelRows;
  return static_cast<size_t>(panels * kPanelRows * columns) * block_bytes(type);
}

void pack_matrix(TensorType type, const uint8_t* rows, size_t row_bytes, int64_t row_count,
                 int64_t columns, uint8_t* out) {
  const size_t element = block_bytes(type);
  const int64_t panels = (row_count + kPanelRows - 1) / kPanelRows;
  std::memset(out, 0, packed_bytes(type, row_count, columns));
  for (int64_t panel = 0; panel < panels; ++panel) {
    uint8_t* panel_out = out + static_cast<size_t>(panel * kPanelRows * columns) * element;
    int64_t height = std::min(kPanelRows, row_count - panel * kPanelRows);
    for (int64_t i = 0; i < height; ++i) {
      const uint8_t* row = rows + static_cast<size_t>(panel * kPanelRows + i) * row_bytes;
      for (int64_t k = 0; k < columns; ++k) {
        std::memcpy(panel_out + static_cast<size_t>(k * kPanelRows + i) * element,
                    row + static_cast<size_t>(k) * element, element);
      }
    }
  }
}

const KernelTable* cpu_kernels(InstructionSet instruction_set) {
  __builtin_cpu_init();
  switch (instruction_set) {
    case InstructionSet::scalar:
      return &detail::kScalarKernels;
    case InstructionSet::avx2:
      if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return &detail::kAvx2Kernels;
      return nullptr;
    case InstructionSet::avx512:
      if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
        return &detail::kAvx512Kernels;
      }
      return nullptr;
  }
  return nullptr;
}

const KernelTable& cpu_kernels() {
  static const KernelTable* chosen = [] {
    const char* forced = std::getenv("CHATFLOW_ISA");
    std::string limit = forced ? forced : "avx512";
    if (limit == "avx512") {
      if (auto* table = cpu_kernels(InstructionSet::avx512)) return table;
      limit = "avx2";
    }
    if (limit == "avx2") {
      if (auto* table = cpu_kernels(InstructionSet::avx2)) return table;
    }
    return cpu_kernels(InstructionSet::scalar);
  }();
  return *chosen;
}

}  // namespace chatflow::kernels
