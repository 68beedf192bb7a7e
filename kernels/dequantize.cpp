// Reading every computable type back as numbers: the block unpacking all readers share, and
// whole rows as floats.
#include <cstring>

#include "kernels/half.h"
#include "kernels/quant_blocks.h"
#include "kernels/quantize.h"

namespace chatflow::kernels {
namespace {

// Nibbles of a 32-value block: value i < 16 low nibble of byte i, else high nibble of i - 16.
void unpack_nibbles(const uint8_t* nibbles, int8_t* out, int offset) {
  for (int i = 0; i < 16; ++i) {
    out[i] = static_cast<int8_t>((nibbles[i] & 0xF) - offset);
    out[16 + i] = static_cast<int8_t>((nibbles[i] >> 4) - offset);
  }
}

void unpack_legacy(TensorType type, const uint8_t* block, UnpackedBlock& out) {
  out.count = 32;
  out.grouped = false;
  out.d = load_half(block);
  out.m = 0;
  switch (type) {
    case TensorType::q4_0:
      unpack_nibbles(block + 2, out.q, 8);
      break;
    case TensorType::q4_1:
      out.m = load_half(block + 2);
      unpack_nibbles(block + 4, out.q, 0);
      break;
    case TensorType::q5_0:
    case TensorType::q5_1: {
      const bool with_min = type == TensorType::q5_1;
      if (with_min) out.m = load_half(block + 2);
      const uint8_t* high_bytes = block + (with_min ? 4 : 2);
      uint32_t high;
      std::memcpy(&high, high_bytes, 4);
      unpack_nibbles(high_bytes + 4, out.q, 0);
      for (int i = 0; i < 32; ++i) {
        int value = out.q[i] | static_cast<int>(((high >> i) & 1) << 4);
        out.q[i] = static_cast<int8_t>(with_min ? value : value - 16);
      }
      break;
    }
    case TensorType::q8_0:
      std::memcpy(out.q, block + 2, 32);
      break;
    case TensorType::iq4_nl:
      unpack_nibbles(block + 2, out.q, 0);
      for (int i = 0; i < 32; ++i)
        out.q[i] = kIq4Values[out.q[i]];
      break;
    default:
      break;
  }
}

void unpack_q2_k(const uint8_t* block, UnpackedBlock& out) {
  const uint8_t* scales = block;
  const uint8_t* quants = block + 16;
  out.d = load_half(block + 80);
  out.dmin = load_half(block + 82);
  for (int g = 0; g < 16; ++g) {
    out.scale[g] = scales[g] & 0xF;
    out.min[g] = scales[g] >> 4;
  }
  // Value 128h + 32k + l is bits 2k..2k+1 of byte 32h + l.
  for (int i = 0; i < 256; ++i) {
    int half = i / 128, shift = 2 * ((i % 128) / 32), l = i % 32;
    out.q[i] = static_cast<int8_t>((quants[32 * half + l] >> shift) & 3);
  }
}

void unpack_q3_k(const uint8_t* block, UnpackedBlock& out) {
  const uint8_t* high = block;
  const uint8_t* quants = block + 32;
  const uint8_t* scales = block + 96;
  out.d = load_half(block + 108);
  out.dmin = 0;
  for (int g = 0; g < 16; ++g) {
    out.scale[g] = static_cast<int16_t>(q3_scale(g, scales));
    out.min[g] = 0;
  }
  // The 2-bit part as q2_k; a clear high bit (bit i / 32 of byte i % 32) subtracts 4.
  for (int i = 0; i < 256; ++i) {
    int half = i / 128, shift = 2 * ((i % 128) / 32), l = i % 32;
    int low = (quants[32 * half + l] >> shift) & 3;
    bool set = (high[i % 32] >> (i / 32)) & 1;
    out.q[i] = static_cast<int8_t>(set ? low : low - 4);
  }
}

void unpack_q45_k(const uint8_t* block, UnpackedBlock& out, bool five_bits) {
  out.d = load_half(block);
  out.dmin = load_half(block + 2);
  const uint8_t* scales = block + 4;
  const uint8_t* high = block + 16;
  const uint8_t* nibbles = block + (five_bits ? 48 : 16);
  for (int j = 0; j < 8; ++j) {
    int scale, min;
    k4_scale_min(j, scales, scale, min);
    out.scale[2 * j] = out.scale[2 * j + 1] = static_cast<int16_t>(scale);
    out.min[2 * j] = out.min[2 * j + 1] = static_cast<int16_t>(min);
  }
  // Sub-block j is the low (even j) or high (odd j) nibbles of bytes 32 (j / 2) ..; its fifth
  // bit is bit j of high byte l.
  for (int i = 0; i < 256; ++i) {
    int j = i / 32, l = i % 32;
    uint8_t byte = nibbles[32 * (j / 2) + l];
    int value = j % 2 ? byte >> 4 : byte & 0xF;
    if (five_bits) value |= ((high[l] >> j) & 1) << 4;
    out.q[i] = static_cast<int8_t>(value);
  }
}

void unpack_q6_k(const uint8_t* block, UnpackedBlock& out) {
  const uint8_t* low = block;
  const uint8_t* high = block + 128;
  const int8_t* scales = reinterpret_cast<const int8_t*>(block + 192);
  out.d = load_half(block + 208);
  out.dmin = 0;
  for (int g = 0; g < 16; ++g) {
    out.scale[g] = scales[g];
    out.min[g] = 0;
  }
  // Value 128h + 32k + l: nibble of low byte 64h + 32 (k % 2) + l (low for k < 2), and bits
  // 2k..2k+1 of high byte 32h + l.
  for (int i = 0; i < 256; ++i) {
    int h = i / 128, k = (i % 128) / 32, l = i % 32;
    uint8_t byte = low[64 * h + 32 * (k % 2) + l];
    int nibble = k < 2 ? byte & 0xF : byte >> 4;
    int top = (high[32 * h + l] >> (2 * k)) & 3;
    out.q[i] = static_cast<int8_t>((nibble | (top << 4)) - 32);
  }
}

void unpack_iq4_xs(const uint8_t* block, UnpackedBlock& out) {
  out.d = load_half(block);
  out.dmin = 0;
  uint16_t scales_high;
  std::memcpy(&scales_high, block + 2, 2);
  const uint8_t* scales_low = block + 4;
  const uint8_t* nibbles = block + 8;
  for (int j = 0; j < 8; ++j) {
    out.scale[2 * j] = out.scale[2 * j + 1] =
        static_cast<int16_t>(iq4xs_scale(j, scales_high, scales_low));
    out.min[2 * j] = out.min[2 * j + 1] = 0;
    unpack_nibbles(nibbles + 16 * j, out.q + 32 * j, 0);
  }
  for (int i = 0; i < 256; ++i)
    out.q[i] = kIq4Values[out.q[i]];
}

}  // namespace

void unpack_block(TensorType type, const uint8_t* block, UnpackedBlock& out) {
  if (block_values(type) == kQuantBlock) {
    unpack_legacy(type, block, out);
    return;
  }
  out.count = 256;
  out.grouped = true;
  out.m = 0;
  switch (type) {
    case TensorType::q2_k:
      unpack_q2_k(block, out);
      break;
    case TensorType::q3_k:
      unpack_q3_k(block, out);
      break;
    case TensorType::q4_k:
      unpack_q45_k(block, out, false);
      break;
    case TensorType::q5_k:
      unpack_q45_k(block, out, true);
      break;
    case TensorType::q6_k:
      unpack_q6_k(block, out);
      break;
    case TensorType::iq4_xs:
      unpack_iq4_xs(block, out);
      break;
    default:
      break;
  }
}

void dequantize_row(TensorType type, const uint8_t* data, int64_t columns, float* out) {
  switch (type) {
    case TensorType::f32:
      std::memcpy(out, data, static_cast<size_t>(columns) * 4);
      return;
    case TensorType::f16:
      for (int64_t i = 0; i < columns; ++i)
        out[i] = load_half(data + 2 * i);
      return;
    case TensorType::bf16:
      for (int64_t i = 0; i < columns; ++i) {
        uint16_t half;
        std::memcpy(&half, data + 2 * i, 2);
        out[i] = bf16_to_f32(half);
      }
      return;
    default:
      break;
  }
  const int64_t values = block_values(type);
  const size_t bytes = block_bytes(type);
  UnpackedBlock block;
  for (int64_t b = 0; b < columns / values; ++b) {
    unpack_block(type, data + static_cast<size_t>(b) * bytes, block);
    for (int i = 0; i < block.count; ++i)
      out[b * values + i] = block.value(i);
  }
}

}  // namespace chatflow::kernels
