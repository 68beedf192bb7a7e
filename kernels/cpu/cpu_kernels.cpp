#include "kernels/cpu/cpu_kernels.h"

#include <cstdlib>
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

const CpuKernelTable* cpu_kernels(InstructionSet instruction_set) {
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

const CpuKernelTable& cpu_kernels() {
  static const CpuKernelTable* chosen = [] {
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
