// Quantising the 256-value super-blocks (q2_k ... q6_k, iq4_xs). A block is first encoded as
// llama.cpp's reference quantiser does (without an importance matrix); then each sub-block's
// scale and minimum codes are moved by one step where that lowers its squared error (plain and
// weighted as the reference's search weighs it), with the values rounded again against what is
// stored. Each sub-block ends no worse than the reference.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/quant_blocks.h"
#include "kernels/quantize_search.h"

namespace chatflow::kernels {
namespace {

using namespace quantize_detail;

// A super-block encoding in the making, before packing: codes per sub-block and stored levels.
struct KCodes {
  float d = 0, dmin = 0;  // as stored
  int scale[16] = {};     // per sub-block (8 used for 32-value sub-blocks)
  int min[16] = {};
  uint8_t levels[256] = {};  // unsigned stored levels (iq4_xs: indices into kIq4Values)
};

struct KFormat {
  int sub_size;                         // 16 or 32 values per sub-block
  int top;                              // highest level
  int offset;                           // level - offset is the signed integer (q3_k 4, q6_k 32)
  int scale_low, scale_high, min_high;  // code ranges (min_high 0: no minimum)
  bool iq4;
};

KFormat format_of(TensorType type) {
  switch (type) {
    case TensorType::q2_k:
      return {16, 3, 0, 0, 15, 15, false};
    case TensorType::q3_k:
      return {16, 7, 4, -32, 31, 0, false};
    case TensorType::q4_k:
      return {32, 15, 0, 0, 63, 63, false};
    case TensorType::q5_k:
      return {32, 31, 0, 0, 63, 63, false};
    case TensorType::q6_k:
      return {16, 63, 32, -128, 127, 0, false};
    default:  // iq4_xs
      return {32, 15, 0, -32, 31, 0, true};
  }
}

float level_value(const KFormat& f, int level) {
  return f.iq4 ? static_cast<float>(kIq4Values[level]) : static_cast<float>(level - f.offset);
}

// Squared error of sub-block j, plain and weighted (the weights the reference's searches use).
struct SubBlockError {
  float plain = 0, weighted = 0;
  bool better_than(const SubBlockError& other) const {
    return weighted < other.weighted && plain <= other.plain;
  }
};

// Rounds sub-block j's values for the given codes into `levels`; returns their error.
SubBlockError round_sub_block(const KFormat& f, const KCodes& c, int j, int scale, int min,
                              const float* x, const float* weights, uint8_t* levels) {
  const float step = c.d * static_cast<float>(scale);
  const float shift = c.dmin * static_cast<float>(min);
  SubBlockError error;
  for (int i = j * f.sub_size; i < (j + 1) * f.sub_size; ++i) {
    int level;
    if (step == 0)
      level = f.iq4 ? 0 : f.offset;
    else if (f.iq4)
      level = nearest_iq4(x[i] / step);
    else
      level = clamp(nearest((x[i] + shift) / step) + f.offset, 0, f.top);
    levels[i] = static_cast<uint8_t>(level);
    float diff = step * level_value(f, level) - shift - x[i];
    error.plain += diff * diff;
    error.weighted += weights[i] * diff * diff;
  }
  return error;
}

SubBlockError sub_block_error(const KFormat& f, const KCodes& c, int j, const float* x,
                              const float* weights) {
  const float step = c.d * static_cast<float>(c.scale[j]);
  const float shift = c.dmin * static_cast<float>(c.min[j]);
  SubBlockError error;
  for (int i = j * f.sub_size; i < (j + 1) * f.sub_size; ++i) {
    float diff = step * level_value(f, c.levels[i]) - shift - x[i];
    error.plain += diff * diff;
    error.weighted += weights[i] * diff * diff;
  }
  return error;
}

// The importance the reference's search gives each value: |x| (q2_k), rms + |x| per sub-block
// (q4_k, q5_k), x^2 (q3_k, q6_k, iq4_xs).
void search_weights(TensorType type, const KFormat& f, const float* x, float* weights) {
  for (int j = 0; j < 256 / f.sub_size; ++j) {
    const float* xs = x + j * f.sub_size;
    float* ws = weights + j * f.sub_size;
    float sum_x2 = 0;
    for (int l = 0; l < f.sub_size; ++l)
      sum_x2 += xs[l] * xs[l];
    const float average = std::sqrt(sum_x2 / static_cast<float>(f.sub_size));
    for (int l = 0; l < f.sub_size; ++l) {
      if (type == TensorType::q2_k)
        ws[l] = std::fabs(xs[l]);
      else if (type == TensorType::q4_k || type == TensorType::q5_k)
        ws[l] = average + std::fabs(xs[l]);
      else
        ws[l] = xs[l] * xs[l];
    }
  }
}

// Each sub-block's scale and minimum codes moved by one step where that lowers both its plain
// and its weighted error: the plain error (what the tensor's RMS error counts) never grows, and
// neither does the error the reference's search judged by (which tracks what the model loses).
void improve(const KFormat& f, KCodes& c, const float* x, const float* weights) {
  const int subs = 256 / f.sub_size;
  uint8_t trial[256];
  for (int j = 0; j < subs; ++j) {
    SubBlockError best = sub_block_error(f, c, j, x, weights);
    int best_scale = c.scale[j], best_min = c.min[j];
    bool changed = false;
    for (int ds = -1; ds <= 1; ++ds) {
      for (int dm = f.min_high ? -1 : 0; dm <= (f.min_high ? 1 : 0); ++dm) {
        int scale = c.scale[j] + ds, min = c.min[j] + dm;
        if (scale < f.scale_low || scale > f.scale_high || min < 0 || min > f.min_high) continue;
        SubBlockError error = round_sub_block(f, c, j, scale, min, x, weights, trial);
        if (error.better_than(best)) {
          best = error;
          best_scale = scale;
          best_min = min;
          changed = true;
        }
      }
    }
    if (changed) {
      round_sub_block(f, c, j, best_scale, best_min, x, weights, trial);
      std::copy(trial + j * f.sub_size, trial + (j + 1) * f.sub_size, c.levels + j * f.sub_size);
      c.scale[j] = best_scale;
      c.min[j] = best_min;
    }
  }
}

// The reference's final pass: every sub-block with a non-zero scale rounded again against the
// stored codes (a zero scale keeps the search's levels, as the reference does).
void reround(const KFormat& f, KCodes& c, const float* x) {
  const int subs = 256 / f.sub_size;
  const float unused_weights[256] = {};
  for (int j = 0; j < subs; ++j) {
    if (c.d * static_cast<float>(c.scale[j]) == 0) continue;
    round_sub_block(f, c, j, c.scale[j], c.min[j], x, unused_weights, c.levels);
  }
}

// q2_k, q4_k, q5_k: affine sub-blocks, scale and minimum codes relative to the largest.
// `all_weights`: search_weights' importance of each value.
void reference_affine(TensorType type, const KFormat& f, const float* x, const float* all_weights,
                      KCodes& c) {
  const int subs = 256 / f.sub_size;
  const int code_top = f.scale_high;
  float scales[16], mins[16];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < subs; ++j) {
    const float* xs = x + j * f.sub_size;
    const float* weights = all_weights + j * f.sub_size;
    if (type == TensorType::q2_k)
      scales[j] =
          affine_levels(16, 3, xs, weights, c.levels + 16 * j, mins[j], -0.5f, 0.1f, 15, true);
    else if (type == TensorType::q4_k)
      scales[j] =
          affine_levels(32, 15, xs, weights, c.levels + 32 * j, mins[j], -1.0f, 0.1f, 20, false);
    else
      scales[j] =
          affine_levels(32, 31, xs, weights, c.levels + 32 * j, mins[j], -0.5f, 0.1f, 15, false);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float top = static_cast<float>(code_top);
  float inverse_scale = max_scale > 0 ? top / max_scale : 0.0f;
  float inverse_min = max_min > 0 ? top / max_min : 0.0f;
  for (int j = 0; j < subs; ++j) {
    c.scale[j] = std::min(code_top, nearest(inverse_scale * scales[j]));
    c.min[j] = std::min(code_top, nearest(inverse_min * mins[j]));
  }
  c.d = as_half(max_scale / top);
  c.dmin = as_half(max_min / top);
}

// q3_k, q6_k: symmetric sub-blocks with signed scale codes relative to the largest.
void reference_symmetric(TensorType type, const float* x, KCodes& c) {
  float scales[16];
  int8_t levels[16];
  float max_scale = 0, largest = 0;
  for (int j = 0; j < 16; ++j) {
    scales[j] = type == TensorType::q3_k ? refined_symmetric_levels(16, 4, x + 16 * j, levels)
                                         : symmetric_levels(16, 32, x + 16 * j, levels);
    for (int l = 0; l < 16; ++l)
      c.levels[16 * j + l] = static_cast<uint8_t>(levels[l]);
    if (std::fabs(scales[j]) > largest) {
      largest = std::fabs(scales[j]);
      max_scale = scales[j];
    }
  }
  if (largest < 1e-15f) {
    c = KCodes{};
    return;
  }
  const bool q3 = type == TensorType::q3_k;
  float inverse = (q3 ? -32.0f : -128.0f) / max_scale;
  for (int j = 0; j < 16; ++j) {
    int code = nearest(inverse * scales[j]);
    c.scale[j] = q3 ? clamp(code, -32, 31) : std::min(127, code);
  }
  c.d = as_half(1 / inverse);
}

// iq4_xs: sub-block scales from the iq4 search, coded relative to the largest; values rounded
// against the unrounded super-block scale, as the reference does.
void reference_iq4_xs(const float* x, KCodes& c) {
  float scales[8];
  float max_scale = 0, largest = 0;
  for (int j = 0; j < 8; ++j) {
    scales[j] = iq4_scale(32, x + 32 * j);
    if (std::fabs(scales[j]) > largest) {
      largest = std::fabs(scales[j]);
      max_scale = scales[j];
    }
  }
  float d = -max_scale / 32;
  c.d = as_half(d);
  float inverse = d != 0 ? 1 / d : 0.0f;
  for (int j = 0; j < 8; ++j) {
    int code = clamp(nearest(inverse * scales[j]), -32, 31);
    c.scale[j] = code;
    float step = d * static_cast<float>(code);
    float inverse_step = step != 0 ? 1 / step : 0.0f;
    for (int l = 0; l < 32; ++l)
      c.levels[32 * j + l] = static_cast<uint8_t>(nearest_iq4(inverse_step * x[32 * j + l]));
  }
}

void pack_q2_k(const KCodes& c, uint8_t* out) {
  const uint8_t* L = c.levels;
  for (int g = 0; g < 16; ++g)
    out[g] = static_cast<uint8_t>(c.scale[g] | (c.min[g] << 4));
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l)
      out[16 + 32 * h + l] =
          static_cast<uint8_t>(L[128 * h + l] | (L[128 * h + 32 + l] << 2) |
                               (L[128 * h + 64 + l] << 4) | (L[128 * h + 96 + l] << 6));
  store_half(out + 80, c.d);
  store_half(out + 82, c.dmin);
}

void pack_q3_k(const KCodes& c, uint8_t* out) {
  const uint8_t* L = c.levels;
  uint8_t* high = out;
  uint8_t* quants = out + 32;
  uint8_t* scales = out + 96;
  std::memset(out, 0, 110);
  for (int i = 0; i < 256; ++i) {
    if (L[i] > 3) high[i % 32] |= static_cast<uint8_t>(1 << (i / 32));
  }
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l)
      quants[32 * h + l] =
          static_cast<uint8_t>((L[128 * h + l] & 3) | ((L[128 * h + 32 + l] & 3) << 2) |
                               ((L[128 * h + 64 + l] & 3) << 4) | ((L[128 * h + 96 + l] & 3) << 6));
  for (int j = 0; j < 16; ++j) {
    int code = c.scale[j] + 32;
    if (j < 8)
      scales[j] |= static_cast<uint8_t>(code & 0xF);
    else
      scales[j - 8] |= static_cast<uint8_t>((code & 0xF) << 4);
    scales[8 + j % 4] |= static_cast<uint8_t>((code >> 4) << (2 * (j / 4)));
  }
  store_half(out + 108, c.d);
}

void pack_q4_k_or_q5_k(TensorType type, const KCodes& c, uint8_t* out) {
  const uint8_t* L = c.levels;
  store_half(out, c.d);
  store_half(out + 2, c.dmin);
  uint8_t* scales = out + 4;
  std::memset(scales, 0, 12);
  for (int j = 0; j < 8; ++j) {
    int scale = c.scale[j], min = c.min[j];
    if (j < 4) {
      scales[j] |= static_cast<uint8_t>(scale);
      scales[j + 4] |= static_cast<uint8_t>(min);
    } else {
      scales[j + 4] = static_cast<uint8_t>((scale & 0xF) | ((min & 0xF) << 4));
      scales[j - 4] |= static_cast<uint8_t>((scale >> 4) << 6);
      scales[j] |= static_cast<uint8_t>((min >> 4) << 6);
    }
  }
  const bool five = type == TensorType::q5_k;
  uint8_t* high = out + 16;
  uint8_t* nibbles = out + (five ? 48 : 16);
  if (five) std::memset(high, 0, 32);
  for (int p = 0; p < 4; ++p)
    for (int l = 0; l < 32; ++l) {
      int a = L[64 * p + l], b = L[64 * p + 32 + l];
      nibbles[32 * p + l] = static_cast<uint8_t>((a & 0xF) | ((b & 0xF) << 4));
      if (five) high[l] |= static_cast<uint8_t>(((a >> 4) << (2 * p)) | ((b >> 4) << (2 * p + 1)));
    }
}

void pack_q6_k(const KCodes& c, uint8_t* out) {
  const uint8_t* L = c.levels;
  uint8_t* low = out;
  uint8_t* high = out + 128;
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const uint8_t* q = L + 128 * h + l;
      low[64 * h + l] = static_cast<uint8_t>((q[0] & 0xF) | ((q[64] & 0xF) << 4));
      low[64 * h + 32 + l] = static_cast<uint8_t>((q[32] & 0xF) | ((q[96] & 0xF) << 4));
      high[32 * h + l] = static_cast<uint8_t>((q[0] >> 4) | ((q[32] >> 4) << 2) |
                                              ((q[64] >> 4) << 4) | ((q[96] >> 4) << 6));
    }
  for (int g = 0; g < 16; ++g)
    out[192 + g] = static_cast<uint8_t>(static_cast<int8_t>(c.scale[g]));
  store_half(out + 208, c.d);
}

void pack_iq4_xs(const KCodes& c, uint8_t* out) {
  const uint8_t* L = c.levels;
  store_half(out, c.d);
  uint16_t scales_high = 0;
  uint8_t* scales_low = out + 4;
  std::memset(scales_low, 0, 4);
  for (int j = 0; j < 8; ++j) {
    int code = c.scale[j] + 32;
    scales_low[j / 2] |= static_cast<uint8_t>((code & 0xF) << (4 * (j % 2)));
    scales_high |= static_cast<uint16_t>((code >> 4) << (2 * j));
  }
  std::memcpy(out + 2, &scales_high, 2);
  for (int j = 0; j < 8; ++j)
    for (int l = 0; l < 16; ++l)
      out[8 + 16 * j + l] = static_cast<uint8_t>(L[32 * j + l] | (L[32 * j + 16 + l] << 4));
}

void pack(TensorType type, const KCodes& c, uint8_t* out) {
  switch (type) {
    case TensorType::q2_k:
      return pack_q2_k(c, out);
    case TensorType::q3_k:
      return pack_q3_k(c, out);
    case TensorType::q4_k:
    case TensorType::q5_k:
      return pack_q4_k_or_q5_k(type, c, out);
    case TensorType::q6_k:
      return pack_q6_k(c, out);
    default:
      return pack_iq4_xs(c, out);
  }
}

}  // namespace

void quantize_k_block(TensorType type, const float* x, uint8_t* out) {
  const KFormat f = format_of(type);
  KCodes c;
  float weights[256];
  search_weights(type, f, x, weights);
  if (type == TensorType::q3_k || type == TensorType::q6_k) {
    reference_symmetric(type, x, c);  // levels come back with the offset added
    if (c.d != 0) reround(f, c, x);
  } else if (type == TensorType::iq4_xs) {
    reference_iq4_xs(x, c);
  } else {
    reference_affine(type, f, x, weights, c);
    reround(f, c, x);
  }
  improve(f, c, x, weights);
  pack(type, c, out);
}

}  // namespace chatflow::kernels
