#include "kernels/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/half.h"

namespace chatflow::kernels {

void quantize_row(TensorType type, const float* values, int64_t count, uint8_t* out) {
  switch (type) {
    case TensorType::f32:
      std::memcpy(out, values, static_cast<size_t>(count) * 4);
      return;
    case TensorType::f16:
      for (int64_t i = 0; i < count; ++i) {
        uint16_t half = f32_to_f16(values[i]);
        std::memcpy(out + 2 * i, &half, 2);
      }
      return;
    case TensorType::bf16:
      for (int64_t i = 0; i < count; ++i) {
        uint16_t half = f32_to_bf16(values[i]);
        std::memcpy(out + 2 * i, &half, 2);
      }
      return;
    case TensorType::q8_0:
      for (int64_t block = 0; block < count / kQuantBlock; ++block) {
        const float* x = values + block * kQuantBlock;
        float largest = 0;
        for (int i = 0; i < 32; ++i)
          largest = std::max(largest, std::fabs(x[i]));
        float scale = largest / 127.0f;
        float inverse = scale != 0 ? 1.0f / scale : 0.0f;
        uint8_t* bytes = out + block * kQ8BlockBytes;
        uint16_t half = f32_to_f16(scale);
        std::memcpy(bytes, &half, 2);
        for (int i = 0; i < 32; ++i)
          bytes[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::lround(x[i] * inverse)));
      }
      return;
    case TensorType::q4_0:
      for (int64_t block = 0; block < count / kQuantBlock; ++block) {
        const float* x = values + block * kQuantBlock;
        // The value of largest magnitude maps to -8, so its sign picks the scale's sign.
        float extreme = 0;
        for (int i = 0; i < 32; ++i) {
          if (std::fabs(x[i]) > std::fabs(extreme)) extreme = x[i];
        }
        float scale = extreme / -8.0f;
        float inverse = scale != 0 ? 1.0f / scale : 0.0f;
        uint8_t* bytes = out + block * kQ4BlockBytes;
        uint16_t half = f32_to_f16(scale);
        std::memcpy(bytes, &half, 2);
        for (int i = 0; i < 16; ++i) {
          int low = std::min(15, static_cast<int>(x[i] * inverse + 8.5f));
          int high = std::min(15, static_cast<int>(x[16 + i] * inverse + 8.5f));
          bytes[2 + i] = static_cast<uint8_t>(std::max(0, low) | (std::max(0, high) << 4));
        }
      }
      return;
  }
}

void dequantize_row(TensorType type, const uint8_t* data, int64_t columns, float* out) {
  switch (type) {
    case TensorType::f32:
      std::memcpy(out, data, static_cast<size_t>(columns) * 4);
      break;
    case TensorType::f16:
      for (int64_t i = 0; i < columns; ++i) {
        uint16_t half;
        std::memcpy(&half, data + 2 * i, 2);
        out[i] = f16_to_f32(half);
      }
      break;
    case TensorType::bf16:
      for (int64_t i = 0; i < columns; ++i) {
        uint16_t half;
        std::memcpy(&half, data + 2 * i, 2);
        out[i] = bf16_to_f32(half);
      }
      break;
    case TensorType::q8_0:
      for (int64_t block = 0; block < columns / kQuantBlock; ++block) {
        const uint8_t* bytes = data + block * kQ8BlockBytes;
        uint16_t scale_bits;
        std::memcpy(&scale_bits, bytes, 2);
        float scale = f16_to_f32(scale_bits);
        for (int i = 0; i < 32; ++i)
          out[block * 32 + i] = scale * static_cast<float>(static_cast<int8_t>(bytes[2 + i]));
      }
      break;
    case TensorType::q4_0:
      for (int64_t block = 0; block < columns / kQuantBlock; ++block) {
        const uint8_t* bytes = data + block * kQ4BlockBytes;
        uint16_t scale_bits;
        std::memcpy(&scale_bits, bytes, 2);
        float scale = f16_to_f32(scale_bits);
        for (int i = 0; i < 16; ++i) {
          out[block * 32 + i] = scale * static_cast<float>((bytes[2 + i] & 0x0F) - 8);
          out[block * 32 + 16 + i] = scale * static_cast<float>((bytes[2 + i] >> 4) - 8);
        }
      }
      break;
  }
}

}  // namespace chatflow::kernels
