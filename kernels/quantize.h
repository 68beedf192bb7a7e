// Converting float rows into the stored tensor types (used to write models; the forward pass
// never converts up front, it dequantises inside the kernels).
#pragma once

#include <cstdint>

#include "kernels/tensor_type.h"

namespace chatflow::kernels {

// Writes row_bytes(type, count) bytes to `out`; `count` must be a multiple of block_values(type).
void quantize_row(TensorType type, const float* values, int64_t count, uint8_t* out);

}  // namespace chatflow::kernels
