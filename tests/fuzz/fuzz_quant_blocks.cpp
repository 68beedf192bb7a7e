// Fuzzes the quantised block decoders: any bytes as blocks of every computable type, read back
// as floats and multiplied by every instruction set's integer kernel, which must agree with the
// scalar kernel (same integers, float sums in another order). Never a crash, an out-of-bounds
// read, or a disagreement beyond rounding. The same bytes read as floats (NaNs and infinities
// included) are quantised as activations by every table, which must write the scalar routine's
// bytes.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/quantize.h"

using namespace chatflow::kernels;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  static const TensorType kTypes[] = {TensorType::q4_0, TensorType::q4_1, TensorType::q5_0,
                                      TensorType::q5_1, TensorType::q8_0, TensorType::iq4_nl,
                                      TensorType::q2_k, TensorType::q3_k, TensorType::q4_k,
                                      TensorType::q5_k, TensorType::q6_k, TensorType::iq4_xs};
  const TensorType type = kTypes[data[0] % 12];
  const int tokens = 1 + data[1] % 9;
  data += 2;
  size -= 2;
  const size_t bytes = block_bytes(type);
  const int64_t blocks = static_cast<int64_t>(size / bytes);
  if (blocks == 0 || blocks > 64) return 0;
  const int64_t columns = blocks * block_values(type);
  std::vector<uint8_t> row(data, data + blocks * bytes);
  // Scales in range: a block of random bits may hold infinities or NaNs in its f16 fields, which
  // are fine to read but make sums incomparable.
  std::vector<float> values(static_cast<size_t>(columns));
  dequantize_row(type, row.data(), columns, values.data());
  bool finite = true;
  for (float value : values)
    finite = finite && std::isfinite(value) && std::fabs(value) < 1e4f;
  std::vector<float> x(static_cast<size_t>(columns) * tokens);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(static_cast<int>((i * 2654435761u) >> 24) - 128) / 64.0f;
  const ActivationLayout layout = activation_layout(activation_format(type), columns);
  std::vector<uint8_t> activations(layout.token_bytes * tokens);
  for (int t = 0; t < tokens; ++t)
    quantize_activations(x.data() + t * columns, layout,
                         activations.data() + t * layout.token_bytes);
  // Every table's activation quantiser against the scalar one, on the input bytes as floats.
  {
    std::vector<float> raw(static_cast<size_t>(columns), 0.0f);
    std::memcpy(raw.data(), data, std::min(size, raw.size() * sizeof(float)));
    std::vector<uint8_t> expected(layout.token_bytes), actual(layout.token_bytes);
    quantize_activations(raw.data(), layout, expected.data());
    const size_t groups = static_cast<size_t>(columns / layout.group);
    const size_t scales = static_cast<size_t>(columns / layout.block) * 4;
    for (InstructionSet isa : kInstructionSets) {
      const CpuKernelTable* table = cpu_kernels(isa);
      if (!table) continue;
      table->quantize_activations[static_cast<int>(layout.format)](raw.data(), layout,
                                                                   actual.data());
      if (std::memcmp(actual.data(), expected.data(), static_cast<size_t>(columns)) != 0 ||
          std::memcmp(actual.data() + layout.scales_offset, expected.data() + layout.scales_offset,
                      scales) != 0 ||
          std::memcmp(actual.data() + layout.sums_offset, expected.data() + layout.sums_offset,
                      groups * 2) != 0 ||
          std::memcmp(actual.data() + layout.scaled_sums_offset,
                      expected.data() + layout.scaled_sums_offset, groups * 4) != 0)
        std::abort();
    }
  }
  std::vector<float> reference(tokens), y(tokens);
  const CpuKernelTable* scalar = cpu_kernels(InstructionSet::scalar);
  scalar->quantized_matmul[quantized_index(type)]({row.data(), bytes * blocks, columns, 0, 1,
                                                   activations.data(), &layout, tokens,
                                                   reference.data(), 1});
  for (InstructionSet isa : kInstructionSets) {
    const CpuKernelTable* table = cpu_kernels(isa);
    if (!table) continue;
    table->quantized_matmul[quantized_index(type)]({row.data(), bytes * blocks, columns, 0, 1,
                                                    activations.data(), &layout, tokens, y.data(),
                                                    1});
    if (!finite) continue;
    for (int t = 0; t < tokens; ++t) {
      double magnitude = 0;
      for (int64_t k = 0; k < columns; ++k)
        magnitude += std::fabs(values[k] * x[t * columns + k]);
      if (std::fabs(y[t] - reference[t]) > 1e-4 * magnitude + 1e-3) std::abort();
    }
  }
  return 0;
}
