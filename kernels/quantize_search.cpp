#include "kernels/quantize_search.h"

#include <algorithm>

#include "kernels/quant_blocks.h"

namespace chatflow::kernels::quantize_detail {
namespace {

constexpr float kAllZero = 1e-15f;

// The value of largest magnitude (with its sign), or 0.
float extreme_value(int n, const float* x) {
  float extreme = 0, largest = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > largest) {
      largest = std::fabs(x[i]);
      extreme = x[i];
    }
  }
  return extreme;
}

}  // namespace

float symmetric_levels(int n, int nmax, const float* x, int8_t* L) {
  const float extreme = extreme_value(n, x);
  if (std::fabs(extreme) < kAllZero) {
    std::fill(L, L + n, 0);
    return 0;
  }
  // For an inverse scale, the weighted least-squares scale and how much it explains.
  auto fit = [&](float inverse, float& dot, float& norm) {
    dot = norm = 0;
    for (int i = 0; i < n; ++i) {
      int level = clamp(nearest(inverse * x[i]), -nmax, nmax - 1);
      float weight = x[i] * x[i];
      dot += weight * x[i] * static_cast<float>(level);
      norm += weight * static_cast<float>(level * level);
    }
  };
  auto assign = [&](float inverse) {
    for (int i = 0; i < n; ++i)
      L[i] = static_cast<int8_t>(nmax + clamp(nearest(inverse * x[i]), -nmax, nmax - 1));
  };
  float inverse = -static_cast<float>(nmax) / extreme;
  float dot, norm;
  fit(inverse, dot, norm);
  assign(inverse);
  float scale = norm != 0 ? dot / norm : 0.0f;
  float best = scale * dot;
  for (int step = -9; step <= 9; ++step) {
    if (step == 0) continue;
    float candidate = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(step)) / extreme;
    fit(candidate, dot, norm);
    if (norm > 0 && dot * dot > best * norm) {
      assign(candidate);
      scale = dot / norm;
      best = scale * dot;
    }
  }
  return scale;
}

float refined_symmetric_levels(int n, int nmax, const float* x, int8_t* L) {
  const float extreme = extreme_value(n, x);
  if (std::fabs(extreme) < kAllZero) {
    std::fill(L, L + n, 0);
    return 0;
  }
  const float inverse = -static_cast<float>(nmax) / extreme;
  float dot = 0, norm = 0;
  for (int i = 0; i < n; ++i) {
    int level = clamp(nearest(inverse * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(level);
    float weight = x[i] * x[i];
    dot += weight * x[i] * static_cast<float>(level);
    norm += weight * static_cast<float>(level * level);
  }
  // Move one value at a time to the level that best fits the others' scale, while that
  // explains more of the block.
  for (int round = 0; round < 5; ++round) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      float weight = x[i] * x[i];
      float rest_dot = dot - weight * x[i] * static_cast<float>(L[i]);
      if (rest_dot <= 0) continue;
      float rest_norm = norm - weight * static_cast<float>(L[i] * L[i]);
      int level = clamp(nearest(x[i] * rest_norm / rest_dot), -nmax, nmax - 1);
      if (level == L[i]) continue;
      float new_dot = rest_dot + weight * x[i] * static_cast<float>(level);
      float new_norm = rest_norm + weight * static_cast<float>(level * level);
      if (new_norm > 0 && new_dot * new_dot * norm > dot * dot * new_norm) {
        L[i] = static_cast<int8_t>(level);
        dot = new_dot;
        norm = new_norm;
        ++changed;
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i)
    L[i] = static_cast<int8_t>(L[i] + nmax);
  return dot / norm;
}

float affine_levels(int n, int nmax, const float* x, const float* weights, uint8_t* L, float& min,
                    float rmin, float rdelta, int steps, bool absolute_error) {
  float low = x[0], high = x[0];
  float weight_sum = weights[0], weighted_x = weights[0] * x[0];
  for (int i = 1; i < n; ++i) {
    low = std::min(low, x[i]);
    high = std::max(high, x[i]);
    weight_sum += weights[i];
    weighted_x += weights[i] * x[i];
  }
  if (low > 0) low = 0;
  if (high == low) {
    std::fill(L, L + n, 0);
    min = -low;
    return 0;
  }
  auto error_of = [&](float scale, float offset, const uint8_t* levels) {
    float error = 0;
    for (int i = 0; i < n; ++i) {
      float diff = scale * static_cast<float>(levels[i]) + offset - x[i];
      error += weights[i] * (absolute_error ? std::fabs(diff) : diff * diff);
    }
    return error;
  };
  float inverse = static_cast<float>(nmax) / (high - low);
  float scale = 1 / inverse;
  for (int i = 0; i < n; ++i)
    L[i] = static_cast<uint8_t>(clamp(nearest(inverse * (x[i] - low)), 0, nmax));
  float best = error_of(scale, low, L);
  uint8_t candidate[256];
  for (int step = 0; step <= steps; ++step) {
    inverse = (rmin + rdelta * static_cast<float>(step) + static_cast<float>(nmax)) / (high - low);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int level = clamp(nearest(inverse * (x[i] - low)), 0, nmax);
      candidate[i] = static_cast<uint8_t>(level);
      float fl = static_cast<float>(level);
      sum_l += weights[i] * fl;
      sum_l2 += weights[i] * fl * fl;
      sum_xl += weights[i] * fl * x[i];
    }
    float determinant = weight_sum * sum_l2 - sum_l * sum_l;
    if (determinant <= 0) continue;
    float this_scale = (weight_sum * sum_xl - weighted_x * sum_l) / determinant;
    float this_offset = (sum_l2 * weighted_x - sum_l * sum_xl) / determinant;
    if (this_offset > 0) {
      this_offset = 0;
      this_scale = sum_xl / sum_l2;
    }
    float error = error_of(this_scale, this_offset, candidate);
    if (error < best) {
      std::copy(candidate, candidate + n, L);
      best = error;
      scale = this_scale;
      low = this_offset;
    }
  }
  min = -low;
  return scale;
}

int nearest_iq4(float value) {
  const int8_t* levels = kIq4Values;
  if (value <= levels[0]) return 0;
  if (value >= levels[15]) return 15;
  int below = 0, above = 15;
  while (above - below > 1) {
    int middle = (below + above) / 2;
    if (value < levels[middle])
      above = middle;
    else
      below = middle;
  }
  return value - static_cast<float>(levels[above - 1]) < static_cast<float>(levels[above]) - value
             ? above - 1
             : above;
}

float iq4_scale(int n, const float* x) {
  // The reference's search: its first guess and 2 * 7 + 1 further candidates.
  constexpr int kTries = 7;
  const float extreme = extreme_value(n, x);
  if (std::fabs(extreme) < kAllZero) return 0;
  const float first = static_cast<float>(kIq4Values[0]);
  auto fit = [&](float inverse, float& dot, float& norm) {
    dot = norm = 0;
    for (int i = 0; i < n; ++i) {
      float level = static_cast<float>(kIq4Values[nearest_iq4(inverse * x[i])]);
      float weight = x[i] * x[i];
      dot += weight * level * x[i];
      norm += weight * level * level;
    }
  };
  float scale = -extreme / first;
  float dot, norm;
  fit(1 / scale, dot, norm);
  scale = dot / norm;
  float best = scale * dot;
  for (int step = -kTries; step <= kTries; ++step) {
    float inverse = (static_cast<float>(step) + first) / extreme;
    fit(inverse, dot, norm);
    if (norm > 0 && dot * dot > best * norm) {
      scale = dot / norm;
      best = scale * dot;
    }
  }
  return scale;
}

}  // namespace chatflow::kernels::quantize_detail
