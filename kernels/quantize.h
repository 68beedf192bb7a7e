// Converting float rows to and from the stored tensor types: writing models (`chatflow
// quantize`, `make-model`), and single rows the forward pass needs as floats (an embedding, a
// norm's weights). Matrix products never convert up front: they work on the blocks.
#pragma once

#include <cstdint>

#include "kernels/tensor_type.h"

namespace chatflow::kernels {

// Writes row_bytes(type, count) bytes to `out`; `count` must be a multiple of block_values(type)
// and `type` computable. Each block's encoding is searched for the least squared error: never
// more than the plain rounding llama.cpp's reference quantisers produce.
void quantize_row(TensorType type, const float* values, int64_t count, uint8_t* out);
// Reads row_bytes(type, columns) bytes of `row` into `columns` floats.
void dequantize_row(TensorType type, const uint8_t* row, int64_t columns, float* out);

}  // namespace chatflow::kernels
