// The searches the quantisers share: rounding, least-squares scales, and the error of a
// candidate encoding. Internal to kernels/quantize*.cpp.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/half.h"

namespace chatflow::kernels::quantize_detail {

// Round half to even (the rounding llama.cpp's reference quantisers use).
inline int nearest(float value) {
  return static_cast<int>(std::nearbyint(value));
}

inline int clamp(int value, int low, int high) {
  return value < low ? low : value > high ? high : value;
}

// Symmetric levels -nmax..nmax-1 for n values, searched over scales near -nmax / max as
// llama.cpp's make_qx_quants does (weights x^2, 19 candidate scales); L gets level + nmax.
// Returns the scale.
float symmetric_levels(int n, int nmax, const float* x, int8_t* L);

// Levels -nmax..nmax-1 refined one value at a time (make_q3_quants with its error search);
// L gets level + nmax. Returns the scale.
float refined_symmetric_levels(int n, int nmax, const float* x, int8_t* L);

// Levels 0..nmax with a minimum, x ~ scale * L - min: the least-squares fit over candidate
// scales (make_qkx2_quants). Returns the scale; `min` gets the (non-negative) minimum.
float affine_levels(int n, int nmax, const float* x, const float* weights, uint8_t* L, float& min,
                    float rmin, float rdelta, int steps, bool absolute_error);

// The scale of n values in iq4 levels (kIq4Values), as the reference's search finds it
// (weights x^2); 0 for values that are all (nearly) zero.
float iq4_scale(int n, const float* x);
// The nearest iq4 level index to `value` (in units of the scale).
int nearest_iq4(float value);

}  // namespace chatflow::kernels::quantize_detail
