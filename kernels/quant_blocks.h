// The block formats of the quantised GGUF types, as small integers and the scales that turn
// them into numbers. Dequantisation, the scalar kernels and the tests read blocks through here;
// the SIMD kernels decode the same bits their own way and are tested against this.
//
// Layouts (bytes, in file order; "d" is an f16 scale):
//   q4_0   d, 16 bytes of nibbles: value i < 16 is the low nibble of byte i, i >= 16 the high
//          nibble of byte i - 16; x = d * (nibble - 8)
//   q4_1   d, m, nibbles as q4_0;                     x = d * nibble + m
//   q5_0   d, 32 high bits (bit i for value i), nibbles; x = d * (q - 16)
//   q5_1   d, m, high bits, nibbles;                  x = d * q + m
//   q8_0   d, 32 signed bytes;                        x = d * q
//   iq4_nl d, nibbles as q4_0;                         x = d * kIq4Values[nibble]
//   q2_k   16 bytes of (scale | min << 4), 64 bytes of 2-bit values, d, dmin
//   q3_k   32 bytes of high bits, 64 bytes of 2-bit values, 12 bytes of 6-bit scales, d
//   q4_k   d, dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles
//   q5_k   d, dmin, 12 bytes of scales and mins, 32 bytes of high bits, 128 bytes of nibbles
//   q6_k   128 bytes of low nibbles, 64 bytes of 2-bit highs, 16 signed scales, d
//   iq4_xs d, 16 bits of scale highs, 4 bytes of scale lows, 128 bytes of nibbles
// A k-quant value is (d * scale[g]) * q - (dmin * min[g]) for its group g of 16 values.
#pragma once

#include <cstdint>

#include "kernels/host_device.h"
#include "kernels/tensor_type.h"

namespace chatflow::kernels {

// The 16 levels of iq4_nl and iq4_xs (a non-uniform grid, denser near zero).
inline constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};

struct UnpackedBlock {
  int count = 0;         // 32 (legacy formats) or 256 (k-quants, iq4_xs)
  bool grouped = false;  // k-quant form: per-16-value integer scales and mins
  int8_t q[256];         // the integers, signed: x = (d * scale) * q - (dmin * min), or d * q + m
  int16_t scale[16];     // per group of 16 values (grouped only)
  int16_t min[16];       // per group of 16 values (grouped only; 0 when the format has none)
  float d = 0;
  float dmin = 0;
  float m = 0;  // legacy formats with a minimum (q4_1, q5_1); else 0

  float value(int i) const {
    if (!grouped) return d * static_cast<float>(q[i]) + m;
    return (d * static_cast<float>(scale[i / 16])) * static_cast<float>(q[i]) -
           dmin * static_cast<float>(min[i / 16]);
  }
};

// `type` must be quantised and computable; `block` holds block_bytes(type) bytes.
void unpack_block(TensorType type, const uint8_t* block, UnpackedBlock& out);

// The 6-bit scale and min of sub-block j (0..7) of q4_k / q5_k.
CHATFLOW_HOST_DEVICE void k4_scale_min(int j, const uint8_t* scales, int& scale, int& min) {
  if (j < 4) {
    scale = scales[j] & 63;
    min = scales[j + 4] & 63;
  } else {
    scale = (scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4);
    min = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

// The signed 6-bit scale of group j (0..15) of q3_k.
CHATFLOW_HOST_DEVICE int q3_scale(int j, const uint8_t* scales) {
  int low = j < 8 ? scales[j] & 0xF : scales[j - 8] >> 4;
  int high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// The signed 6-bit scale of sub-block j (0..7) of iq4_xs.
CHATFLOW_HOST_DEVICE int iq4xs_scale(int j, uint16_t scales_high, const uint8_t* scales_low) {
  int low = (scales_low[j / 2] >> (4 * (j % 2))) & 0xF;
  int high = (scales_high >> (2 * j)) & 3;
  return (low | (high << 4)) - 32;
}

}  // namespace chatflow::kernels
