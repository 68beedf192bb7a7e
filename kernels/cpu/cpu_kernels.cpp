#include "kernels/cpu/cpu_kernels.h"

#include <algorithm>
#include <cpuid.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/syscall.h>
#include <unistd.h>

namespace chatflow::kernels {

int float_type_index(TensorType type) {
  switch (type) {
    case TensorType::f16:
      return 1;
    case TensorType::bf16:
      return 2;
    default:
      return 0;
  }
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

std::string_view to_string(InstructionSet instruction_set) {
  switch (instruction_set) {
    case InstructionSet::scalar:
      return "scalar";
    case InstructionSet::avx2:
      return "avx2";
    case InstructionSet::avx_vnni:
      return "avx_vnni";
    case InstructionSet::avx512:
      return "avx512";
    case InstructionSet::avx512_vnni:
      return "avx512_vnni";
    case InstructionSet::avx512_amx:
      return "avx512_amx";
  }
  return "scalar";
}

namespace {

// CPUID bits that not every compiler's __builtin_cpu_supports names (clang 14 knows neither
// "f16c" nor "avxvnni"); the AVX state the OS saves is checked through "avx2" below.
bool cpuid_bit(unsigned leaf, unsigned subleaf, int reg, int bit) {
  unsigned regs[4] = {};
  if (!__get_cpuid_count(leaf, subleaf, &regs[0], &regs[1], &regs[2], &regs[3])) return false;
  return (regs[reg] >> bit) & 1u;
}
constexpr int kEax = 0, kEcx = 2, kEdx = 3;

// Linux hands a process the AMX tile state only when asked (arch_prctl ARCH_REQ_XCOMP_PERM for
// XFEATURE_XTILEDATA); asked once, for every thread of the process.
bool tile_state_granted() {
  static const bool granted = [] {
#if defined(__linux__)
    constexpr long kRequestPermission = 0x1023, kTileData = 18;
    return syscall(SYS_arch_prctl, kRequestPermission, kTileData) == 0;
#else
    return false;
#endif
  }();
  return granted;
}

bool supported(InstructionSet instruction_set) {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    cpuid_bit(1, 0, kEcx, 29);  // f16c
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512dq");
  switch (instruction_set) {
    case InstructionSet::scalar:
      return true;
    case InstructionSet::avx2:
      return avx2;
    case InstructionSet::avx_vnni:
      return avx2 && cpuid_bit(7, 1, kEax, 4);  // avx_vnni
    case InstructionSet::avx512:
      return avx512;
    case InstructionSet::avx512_vnni:
      return avx512 && __builtin_cpu_supports("avx512vnni");
    case InstructionSet::avx512_amx:
      return avx512 && __builtin_cpu_supports("avx512vnni") &&
             __builtin_cpu_supports("avx512vbmi") && cpuid_bit(7, 0, kEdx, 24) &&  // amx_tile
             cpuid_bit(7, 0, kEdx, 25) &&                                          // amx_int8
             tile_state_granted();
  }
  return false;
}

CpuKernelTable combine(const CpuKernelTable& base, const QuantizedKernels& quantized) {
  CpuKernelTable table = base;
  table.quantized_instruction_set = quantized.name;
  std::copy(std::begin(quantized.matmul), std::end(quantized.matmul),
            std::begin(table.quantized_matmul));
  table.quantize_activations[0] = table.quantize_activations[1] = &quantize_activations;
  return table;
}

CpuKernelTable with_vector_quantizer(CpuKernelTable table) {
  table.quantize_activations[0] = table.quantize_activations[1] =
      &detail::quantize_activations_avx512;
  return table;
}

// `base` with the kernels `overrides` has in place of its own.
CpuKernelTable combine(const CpuKernelTable& base, const QuantizedKernels& quantized,
                    const QuantizedKernels& overrides) {
  CpuKernelTable table = combine(base, quantized);
  table.quantized_instruction_set = overrides.name;
  for (int i = 0; i < kQuantizedKernelTypes; ++i)
    if (overrides.matmul[i]) table.quantized_matmul[i] = overrides.matmul[i];
  return table;
}

}  // namespace

const CpuKernelTable* cpu_kernels(InstructionSet instruction_set) {
  if (!supported(instruction_set)) return nullptr;
  // Built on first use: the tables they combine live in other files' static storage.
  static const CpuKernelTable tables[] = {
      combine(detail::kScalarKernels, detail::kScalarQuantized),
      combine(detail::kAvx2Kernels, detail::kAvx2Quantized),
      combine(detail::kAvx2Kernels, detail::kAvxVnniQuantized),
      combine(detail::kAvx512Kernels, detail::kAvx2Quantized),
      with_vector_quantizer(combine(detail::kAvx512Kernels, detail::kAvx512VnniQuantized)),
      with_vector_quantizer(
          combine(detail::kAvx512Kernels, detail::kAvx512VnniQuantized, detail::kAmxQuantized))};
  return &tables[static_cast<int>(instruction_set)];
}

const CpuKernelTable& cpu_kernels() {
  static const CpuKernelTable* chosen = [] {
    const char* forced = std::getenv("CHATFLOW_ISA");
    std::string limit = forced ? forced : "";
    const bool known = std::any_of(std::begin(kInstructionSets), std::end(kInstructionSets),
                                   [&](InstructionSet set) { return to_string(set) == limit; });
    if (forced && !known) {
      std::string names;
      for (InstructionSet set : kInstructionSets)
        names += std::string(names.empty() ? "" : ", ") + std::string(to_string(set));
      std::fprintf(stderr,
                   "chatflow: CHATFLOW_ISA=%s is not one of %s; using the best this processor "
                   "has\n",
                   forced, names.c_str());
    }
    const CpuKernelTable* best = cpu_kernels(InstructionSet::scalar);
    for (InstructionSet candidate : kInstructionSets) {
      if (const CpuKernelTable* table = cpu_kernels(candidate)) best = table;
      if (to_string(candidate) == limit) break;
    }
    return best;
  }();
  return *chosen;
}

}  // namespace chatflow::kernels
