// One value of a stored block, decoded the same way on the host and on an NVIDIA GPU. The CUDA
// kernels read weights through these functions (one thread per value or per group of values),
// and the host tests compare them bit for bit with the CPU's unpack_block (kernels/
// quant_blocks.h gives the layouts): a decoding error found here never needs a GPU to show.
//
// Nothing here may use what only one side has: no memcpy, no intrinsics, no tables outside the
// functions (a device function cannot read a host global), no exceptions.
#pragma once

#include <cstdint>

#include "kernels/host_device.h"
#include "kernels/quant_blocks.h"
#include "kernels/tensor_type.h"

namespace chatflow::kernels::cuda {

// Values and bytes per block of each type these functions decode; 0 for the rest.
CHATFLOW_HOST_DEVICE int decoded_block_values(TensorType type) {
  switch (type) {
    case TensorType::f32:
    case TensorType::f16:
    case TensorType::bf16:
      return 1;
    case TensorType::q4_0:
    case TensorType::q4_1:
    case TensorType::q5_0:
    case TensorType::q5_1:
    case TensorType::q8_0:
    case TensorType::iq4_nl:
      return 32;
    case TensorType::q2_k:
    case TensorType::q3_k:
    case TensorType::q4_k:
    case TensorType::q5_k:
    case TensorType::q6_k:
    case TensorType::iq4_xs:
      return 256;
    default:
      return 0;
  }
}

CHATFLOW_HOST_DEVICE int decoded_block_bytes(TensorType type) {
  switch (type) {
    case TensorType::f32:
      return 4;
    case TensorType::f16:
    case TensorType::bf16:
      return 2;
    case TensorType::q4_0:
    case TensorType::iq4_nl:
      return 18;
    case TensorType::q4_1:
      return 20;
    case TensorType::q5_0:
      return 22;
    case TensorType::q5_1:
      return 24;
    case TensorType::q8_0:
      return 34;
    case TensorType::q2_k:
      return 84;
    case TensorType::q3_k:
      return 110;
    case TensorType::q4_k:
      return 144;
    case TensorType::q5_k:
      return 176;
    case TensorType::q6_k:
      return 210;
    case TensorType::iq4_xs:
      return 136;
    default:
      return 0;
  }
}

CHATFLOW_HOST_DEVICE float float_from_bits(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  return __builtin_bit_cast(float, bits);
#endif
}

// Products and sums rounded one by one, as the CPU rounds them: the device compiler would fuse
// d * q + m into one fused multiply-add (one rounding) and differ in the last bit.
CHATFLOW_HOST_DEVICE float multiply(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

CHATFLOW_HOST_DEVICE float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

CHATFLOW_HOST_DEVICE uint32_t load_u16(const uint8_t* bytes) {
  return static_cast<uint32_t>(bytes[0]) | (static_cast<uint32_t>(bytes[1]) << 8);
}

CHATFLOW_HOST_DEVICE uint32_t load_u32(const uint8_t* bytes) {
  return load_u16(bytes) | (load_u16(bytes + 2) << 16);
}

// IEEE half to float, exact (subnormals included), as kernels/half.h's f16_to_f32.
CHATFLOW_HOST_DEVICE float half_to_float(uint32_t half) {
  uint32_t sign = (half & 0x8000u) << 16;
  uint32_t exponent = (half >> 10) & 0x1Fu;
  uint32_t mantissa = half & 0x3FFu;
  if (exponent == 0) {
    if (mantissa == 0) return float_from_bits(sign);
    exponent = 127 - 15 + 1;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    return float_from_bits(sign | (exponent << 23) | ((mantissa & 0x3FFu) << 13));
  }
  if (exponent == 31) return float_from_bits(sign | 0x7F800000u | (mantissa << 13));
  return float_from_bits(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

CHATFLOW_HOST_DEVICE float load_half_at(const uint8_t* bytes) {
  return half_to_float(load_u16(bytes));
}

// Value i (0..31) of a legacy block's nibbles: the low nibble of byte i for i < 16, else the
// high nibble of byte i - 16.
CHATFLOW_HOST_DEVICE int legacy_nibble(const uint8_t* nibbles, int i) {
  return i < 16 ? nibbles[i] & 0xF : nibbles[i - 16] >> 4;
}

CHATFLOW_HOST_DEVICE int iq4_level(int nibble) {
  // The 16 levels of iq4_nl / iq4_xs (kernels/quant_blocks.h's kIq4Values), as a switch: a device
  // function cannot read a host table.
  switch (nibble) {
    case 0:
      return -127;
    case 1:
      return -104;
    case 2:
      return -83;
    case 3:
      return -65;
    case 4:
      return -49;
    case 5:
      return -35;
    case 6:
      return -22;
    case 7:
      return -10;
    case 8:
      return 1;
    case 9:
      return 13;
    case 10:
      return 25;
    case 11:
      return 38;
    case 12:
      return 53;
    case 13:
      return 69;
    case 14:
      return 89;
    default:
      return 113;
  }
}

// The legacy formats: x = d * q + m (m = 0 without a minimum), the CPU's exact expression.
CHATFLOW_HOST_DEVICE float decode_legacy(TensorType type, const uint8_t* block, int i) {
  const float d = load_half_at(block);
  float m = 0;
  int q = 0;
  switch (type) {
    case TensorType::q4_0:
      q = legacy_nibble(block + 2, i) - 8;
      break;
    case TensorType::q4_1:
      m = load_half_at(block + 2);
      q = legacy_nibble(block + 4, i);
      break;
    case TensorType::q5_0:
    case TensorType::q5_1: {
      const bool with_min = type == TensorType::q5_1;
      if (with_min) m = load_half_at(block + 2);
      const uint8_t* high = block + (with_min ? 4 : 2);
      q = legacy_nibble(high + 4, i) | static_cast<int>(((load_u32(high) >> i) & 1u) << 4);
      if (!with_min) q -= 16;
      break;
    }
    case TensorType::q8_0:
      q = static_cast<int8_t>(block[2 + i]);
      break;
    case TensorType::iq4_nl:
      q = iq4_level(legacy_nibble(block + 2, i));
      break;
    default:
      break;
  }
  return add(multiply(d, static_cast<float>(q)), m);
}

// The k-quants and iq4_xs: x = (d * scale) * q - dmin * min for value i's group of 16, the
// CPU's exact expression (dmin and min 0 where the format has none).
CHATFLOW_HOST_DEVICE float decode_super_block(TensorType type, const uint8_t* block, int i) {
  float d = 0, dmin = 0;
  int scale = 0, min = 0, q = 0;
  const int l = i % 32;
  switch (type) {
    case TensorType::q2_k: {
      d = load_half_at(block + 80);
      dmin = load_half_at(block + 82);
      scale = block[i / 16] & 0xF;
      min = block[i / 16] >> 4;
      q = (block[16 + 32 * (i / 128) + l] >> (2 * ((i % 128) / 32))) & 3;
      break;
    }
    case TensorType::q3_k: {
      const uint8_t* scales = block + 96;
      d = load_half_at(block + 108);
      scale = q3_scale(i / 16, scales);
      const int two_bits = (block[32 + 32 * (i / 128) + l] >> (2 * ((i % 128) / 32))) & 3;
      const bool set = (block[l] >> (i / 32)) & 1;
      q = set ? two_bits : two_bits - 4;
      break;
    }
    case TensorType::q4_k:
    case TensorType::q5_k: {
      const bool five_bits = type == TensorType::q5_k;
      d = load_half_at(block);
      dmin = load_half_at(block + 2);
      const int j = i / 32;
      k4_scale_min(j, block + 4, scale, min);
      const uint8_t byte = block[(five_bits ? 48 : 16) + 32 * (j / 2) + l];
      q = j % 2 ? byte >> 4 : byte & 0xF;
      if (five_bits) q |= ((block[16 + l] >> j) & 1) << 4;
      break;
    }
    case TensorType::q6_k: {
      d = load_half_at(block + 208);
      scale = static_cast<int8_t>(block[192 + i / 16]);
      const int h = i / 128, k = (i % 128) / 32;
      const uint8_t byte = block[64 * h + 32 * (k % 2) + l];
      const int nibble = k < 2 ? byte & 0xF : byte >> 4;
      const int top = (block[128 + 32 * h + l] >> (2 * k)) & 3;
      q = (nibble | (top << 4)) - 32;
      break;
    }
    case TensorType::iq4_xs: {
      d = load_half_at(block);
      const int j = i / 32;
      scale = iq4xs_scale(j, static_cast<uint16_t>(load_u16(block + 2)), block + 4);
      q = iq4_level(legacy_nibble(block + 8 + 16 * j, l));
      break;
    }
    default:
      break;
  }
  return add(multiply(multiply(d, static_cast<float>(scale)), static_cast<float>(q)),
             -multiply(dmin, static_cast<float>(min)));
}

// Value `index` of a row stored as `type` (a type decoded_block_values() knows).
CHATFLOW_HOST_DEVICE float decode_value(TensorType type, const uint8_t* row, int64_t index) {
  switch (type) {
    case TensorType::f32:
      return float_from_bits(load_u32(row + 4 * index));
    case TensorType::f16:
      return load_half_at(row + 2 * index);
    case TensorType::bf16:
      return float_from_bits(load_u16(row + 2 * index) << 16);
    default:
      break;
  }
  const int values = decoded_block_values(type);
  const uint8_t* block = row + (index / values) * decoded_block_bytes(type);
  const int i = static_cast<int>(index % values);
  return values == 32 ? decode_legacy(type, block, i) : decode_super_block(type, block, i);
}

}  // namespace chatflow::kernels::cuda
