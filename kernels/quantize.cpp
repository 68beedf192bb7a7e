// Quantising rows: plain types, and the 32-value formats. Each block is encoded the way
// llama.cpp's reference quantiser does, then better encodings are searched (other scales, a
// least-squares refit); the one with the least squared error is written, so a block is never
// worse than the reference's.
#include "kernels/quantize.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "kernels/half.h"
#include "kernels/quant_blocks.h"
#include "kernels/quantize_search.h"

namespace chatflow::kernels {

void quantize_k_block(TensorType type, const float* x, uint8_t* out);  // quantize_k.cpp

namespace {

using namespace quantize_detail;

// A 32-value encoding in the making: levels are the stored integers (before any offset).
struct LegacyCandidate {
  float d = 0;  // as stored
  float m = 0;  // as stored (formats with a minimum)
  uint8_t levels[32] = {};
};

// The value level l stands for, per format.
float legacy_value(TensorType type, const LegacyCandidate& c, int level) {
  switch (type) {
    case TensorType::q4_0:
      return c.d * static_cast<float>(level - 8);
    case TensorType::q5_0:
      return c.d * static_cast<float>(level - 16);
    case TensorType::q8_0:
      return c.d * static_cast<float>(static_cast<int8_t>(level));
    case TensorType::iq4_nl:
      return c.d * static_cast<float>(kIq4Values[level]);
    default:  // q4_1, q5_1
      return c.d * static_cast<float>(level) + c.m;
  }
}

// Squared error, plain and weighted as the reference's search weighs it (iq4_nl: x^2; the
// others search nothing, so plain).
struct LegacyError {
  float plain = 0, weighted = 0;
  bool better_than(const LegacyError& other) const {
    return plain < other.plain && weighted <= other.weighted;
  }
};

LegacyError legacy_error(TensorType type, const LegacyCandidate& c, const float* x) {
  LegacyError error;
  for (int i = 0; i < 32; ++i) {
    float diff = legacy_value(type, c, c.levels[i]) - x[i];
    error.plain += diff * diff;
    error.weighted += (type == TensorType::iq4_nl ? x[i] * x[i] : 1.0f) * diff * diff;
  }
  return error;
}

// Rounds every value to its nearest level for the candidate's stored scale (and minimum).
void round_to_levels(TensorType type, LegacyCandidate& c, const float* x) {
  for (int i = 0; i < 32; ++i) {
    int level;
    if (type == TensorType::iq4_nl) {
      level = c.d != 0 ? nearest_iq4(x[i] / c.d) : 0;
    } else if (type == TensorType::q4_1 || type == TensorType::q5_1) {
      int top = type == TensorType::q4_1 ? 15 : 31;
      level = c.d != 0 ? clamp(nearest((x[i] - c.m) / c.d), 0, top) : 0;
    } else if (type == TensorType::q8_0) {
      level = c.d != 0 ? clamp(nearest(x[i] / c.d), -127, 127) & 0xFF : 0;
    } else {
      int offset = type == TensorType::q4_0 ? 8 : 16;
      level = c.d != 0 ? clamp(nearest(x[i] / c.d) + offset, 0, 2 * offset - 1) : offset;
    }
    c.levels[i] = static_cast<uint8_t>(level);
  }
}

// The reference encodings, exactly as llama.cpp's quantize_row_*_ref write them.
LegacyCandidate reference_encoding(TensorType type, const float* x) {
  LegacyCandidate c;
  float largest = 0, extreme = 0, low = FLT_MAX, high = -FLT_MAX;
  for (int i = 0; i < 32; ++i) {
    if (std::fabs(x[i]) > largest) {
      largest = std::fabs(x[i]);
      extreme = x[i];
    }
    low = std::min(low, x[i]);
    high = std::max(high, x[i]);
  }
  switch (type) {
    case TensorType::q8_0: {
      float d = largest / 127.0f;
      float inverse = d != 0 ? 1.0f / d : 0.0f;
      c.d = as_half(d);
      for (int i = 0; i < 32; ++i)
        c.levels[i] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[i] * inverse)));
      break;
    }
    case TensorType::q4_0:
    case TensorType::q5_0: {
      const int offset = type == TensorType::q4_0 ? 8 : 16;
      float d = extreme / static_cast<float>(-offset);
      float inverse = d != 0 ? 1.0f / d : 0.0f;
      c.d = as_half(d);
      for (int i = 0; i < 32; ++i) {
        int level = static_cast<int8_t>(x[i] * inverse + (static_cast<float>(offset) + 0.5f));
        c.levels[i] = static_cast<uint8_t>(std::min(2 * offset - 1, level));
      }
      break;
    }
    case TensorType::q4_1:
    case TensorType::q5_1: {
      const int top = type == TensorType::q4_1 ? 15 : 31;
      float d = (high - low) / static_cast<float>(top);
      float inverse = d != 0 ? 1.0f / d : 0.0f;
      c.d = as_half(d);
      c.m = as_half(low);
      for (int i = 0; i < 32; ++i) {
        int level = static_cast<uint8_t>((x[i] - low) * inverse + 0.5f);
        c.levels[i] = static_cast<uint8_t>(std::min(top, level));
      }
      break;
    }
    case TensorType::iq4_nl: {
      float scale = iq4_scale(32, x);
      c.d = as_half(scale);
      float inverse = scale != 0 ? 1 / scale : 0;
      for (int i = 0; i < 32; ++i)
        c.levels[i] = static_cast<uint8_t>(nearest_iq4(inverse * x[i]));
      break;
    }
    default:
      break;
  }
  return c;
}

// Least-squares scale (and minimum) for the candidate's levels, rounded as stored, and the
// levels rounded again for it.
LegacyCandidate refit(TensorType type, const LegacyCandidate& c, const float* x) {
  LegacyCandidate next = c;
  if (type == TensorType::q4_1 || type == TensorType::q5_1) {
    double n = 32, sum_l = 0, sum_l2 = 0, sum_x = 0, sum_xl = 0;
    for (int i = 0; i < 32; ++i) {
      double l = c.levels[i];
      sum_l += l;
      sum_l2 += l * l;
      sum_x += x[i];
      sum_xl += x[i] * l;
    }
    double determinant = n * sum_l2 - sum_l * sum_l;
    if (determinant <= 0) return c;
    next.d = as_half(static_cast<float>((n * sum_xl - sum_x * sum_l) / determinant));
    next.m = as_half(static_cast<float>((sum_l2 * sum_x - sum_l * sum_xl) / determinant));
  } else {
    double dot = 0, norm = 0;
    for (int i = 0; i < 32; ++i) {
      LegacyCandidate unit = c;
      unit.d = 1;
      double level = legacy_value(type, unit, c.levels[i]);
      dot += x[i] * level;
      norm += level * level;
    }
    if (norm <= 0) return c;
    next.d = as_half(static_cast<float>(dot / norm));
  }
  round_to_levels(type, next, x);
  return next;
}

void write_legacy(TensorType type, const LegacyCandidate& c, uint8_t* out) {
  store_half(out, c.d);
  uint8_t* nibbles = out + 2;
  if (type == TensorType::q8_0) {
    std::memcpy(out + 2, c.levels, 32);
    return;
  }
  if (type == TensorType::q4_1 || type == TensorType::q5_1) {
    store_half(out + 2, c.m);
    nibbles = out + 4;
  }
  if (type == TensorType::q5_0 || type == TensorType::q5_1) {
    uint32_t high = 0;
    for (int i = 0; i < 32; ++i)
      high |= static_cast<uint32_t>((c.levels[i] >> 4) & 1) << i;
    std::memcpy(nibbles, &high, 4);
    nibbles += 4;
  }
  for (int i = 0; i < 16; ++i)
    nibbles[i] = static_cast<uint8_t>((c.levels[i] & 0xF) | ((c.levels[16 + i] & 0xF) << 4));
}

void quantize_legacy_block(TensorType type, const float* x, uint8_t* out) {
  LegacyCandidate best = reference_encoding(type, x);
  LegacyError best_error = legacy_error(type, best, x);
  auto consider = [&](const LegacyCandidate& candidate) {
    LegacyError error = legacy_error(type, candidate, x);
    if (error.better_than(best_error)) {
      best = candidate;
      best_error = error;
    }
  };
  // The reference rounds against the unrounded scale: rounding against the stored one, then
  // refitting, can only help.
  LegacyCandidate rounded = best;
  round_to_levels(type, rounded, x);
  consider(rounded);
  LegacyCandidate current = best;
  for (int round = 0; round < 3; ++round) {
    current = refit(type, current, x);
    consider(current);
  }
  write_legacy(type, best, out);
}

void quantize_plain(TensorType type, const float* values, int64_t count, uint8_t* out) {
  if (type == TensorType::f32) {
    std::memcpy(out, values, static_cast<size_t>(count) * 4);
    return;
  }
  for (int64_t i = 0; i < count; ++i) {
    uint16_t half = type == TensorType::f16 ? f32_to_f16(values[i]) : f32_to_bf16(values[i]);
    std::memcpy(out + 2 * i, &half, 2);
  }
}

}  // namespace

void quantize_row(TensorType type, const float* values, int64_t count, uint8_t* out) {
  if (!is_quantized(type)) {
    quantize_plain(type, values, count, out);
    return;
  }
  const int64_t values_per_block = block_values(type);
  const size_t bytes = block_bytes(type);
  for (int64_t b = 0; b < count / values_per_block; ++b) {
    const float* x = values + b * values_per_block;
    uint8_t* block = out + static_cast<size_t>(b) * bytes;
    if (values_per_block == kQuantBlock)
      quantize_legacy_block(type, x, block);
    else
      quantize_k_block(type, x, block);
  }
}

}  // namespace chatflow::kernels
