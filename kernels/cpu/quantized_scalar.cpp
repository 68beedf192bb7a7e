// Portable integer kernels: each block unpacked to its integers (kernels/quant_blocks.h), exact
// integer dot products, then the block's scales. The reference the SIMD kernels are tested
// against, and what runs on a processor without AVX2.
#include <algorithm>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/quant_blocks.h"

namespace chatflow::kernels {
namespace {

template <TensorType kType>
void scalar_quantized_matmul(const QuantizedMatmulArgs& a) {
  const int64_t values = block_values(kType);
  const size_t bytes = block_bytes(kType);
  const int64_t blocks = a.columns / values;
  constexpr int64_t kChunk = 64;
  float sums[kChunk];
  UnpackedBlock block;
  for (int64_t r = a.row_begin; r < a.row_end; ++r) {
    const uint8_t* row = a.weights + static_cast<size_t>(r) * a.row_bytes;
    for (int64_t t0 = 0; t0 < a.tokens; t0 += kChunk) {
      const int64_t n = std::min(kChunk, a.tokens - t0);
      std::fill(sums, sums + n, 0.0f);
      for (int64_t b = 0; b < blocks; ++b) {
        unpack_block(kType, row + static_cast<size_t>(b) * bytes, block);
        for (int64_t t = 0; t < n; ++t) {
          TokenActivations x = token_activations(a.x, *a.layout, t0 + t);
          const int8_t* q = x.values + b * values;
          const float dx = x.scales[b];
          if (!block.grouped) {
            int32_t dot = 0;
            for (int i = 0; i < 32; ++i)
              dot += block.q[i] * q[i];
            sums[t] += (block.d * dx) * static_cast<float>(dot);
            if (block.m != 0) sums[t] += block.m * x.scaled_sums[b];
            continue;
          }
          int32_t scaled = 0, mins = 0;
          for (int g = 0; g < 16; ++g) {
            int32_t dot = 0;
            for (int i = 16 * g; i < 16 * g + 16; ++i)
              dot += block.q[i] * q[i];
            scaled += block.scale[g] * dot;
            mins += block.min[g] * x.sums[16 * b + g];
          }
          sums[t] += (block.d * dx) * static_cast<float>(scaled) -
                     (block.dmin * dx) * static_cast<float>(mins);
        }
      }
      for (int64_t t = 0; t < n; ++t)
        a.y[(t0 + t) * a.y_stride + r] = sums[t];
    }
  }
}

}  // namespace

const QuantizedKernels detail::kScalarQuantized = {
    "scalar",
    {&scalar_quantized_matmul<TensorType::q4_0>, &scalar_quantized_matmul<TensorType::q4_1>,
     &scalar_quantized_matmul<TensorType::q5_0>, &scalar_quantized_matmul<TensorType::q5_1>,
     &scalar_quantized_matmul<TensorType::q8_0>, &scalar_quantized_matmul<TensorType::iq4_nl>,
     &scalar_quantized_matmul<TensorType::q2_k>, &scalar_quantized_matmul<TensorType::q3_k>,
     &scalar_quantized_matmul<TensorType::q4_k>, &scalar_quantized_matmul<TensorType::q5_k>,
     &scalar_quantized_matmul<TensorType::q6_k>, &scalar_quantized_matmul<TensorType::iq4_xs>}};

}  // namespace chatflow::kernels
