// Portable kernels: eight-lane "vectors" in plain C++, so any processor runs chatflow (the
// compiler vectorises what it can for the baseline instruction set).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/half.h"
#include "kernels/quantize.h"

namespace chatflow::kernels {
namespace scalar {

struct Simd {
  // Tokens per tile of the packed matrix product (what the registers hold).
  static constexpr int kPackedTokens = 4;
  static constexpr int kWidth = 8;
  struct V {
    std::array<float, 8> lane;
  };
  template <class F>
  static V map(F f) {
    V v;
    for (int i = 0; i < kWidth; ++i)
      v.lane[i] = f(i);
    return v;
  }
  static V zero() { return V{}; }
  static V set1(float value) {
    return map([&](int) { return value; });
  }
  static V load(const float* p) {
    return map([&](int i) { return p[i]; });
  }
  static V load_partial(const float* p, int n) {
    return map([&](int i) { return i < n ? p[i] : 0.0f; });
  }
  static void store(float* p, V v) { std::copy(v.lane.begin(), v.lane.end(), p); }
  static void store_partial(float* p, V v, int n) {
    std::copy(v.lane.begin(), v.lane.begin() + n, p);
  }
  static V fma(V a, V b, V c) {
    return map([&](int i) { return a.lane[i] * b.lane[i] + c.lane[i]; });
  }
  static V mul(V a, V b) {
    return map([&](int i) { return a.lane[i] * b.lane[i]; });
  }
  static V div(V a, V b) {
    return map([&](int i) { return a.lane[i] / b.lane[i]; });
  }
  static V add(V a, V b) {
    return map([&](int i) { return a.lane[i] + b.lane[i]; });
  }
  static V sub(V a, V b) {
    return map([&](int i) { return a.lane[i] - b.lane[i]; });
  }
  static V max(V a, V b) {
    return map([&](int i) { return std::max(a.lane[i], b.lane[i]); });
  }
  static float reduce_sum(V v) {
    float sum = 0;
    for (float lane : v.lane)
      sum += lane;
    return sum;
  }
  static float reduce_max(V v) { return *std::max_element(v.lane.begin(), v.lane.end()); }
  static float f16(uint16_t half) { return f16_to_f32(half); }
  static uint16_t to_f16(float value) { return f32_to_f16(value); }
  static V load_f16(const uint16_t* p) {
    return map([&](int i) { return f16_to_f32(p[i]); });
  }
  static V load_f16_partial(const uint16_t* p, int n) {
    return map([&](int i) { return i < n ? f16_to_f32(p[i]) : 0.0f; });
  }
  static V load_i8(const int8_t* p) {
    return map([&](int i) { return static_cast<float>(p[i]); });
  }
  static V load_bf16(const uint16_t* p) {
    return map([&](int i) { return bf16_to_f32(p[i]); });
  }
  static V load_bf16_partial(const uint16_t* p, int n) {
    return map([&](int i) { return i < n ? bf16_to_f32(p[i]) : 0.0f; });
  }

  static V exp(V x) {
    return map([&](int i) { return std::exp(x.lane[i]); });
  }
};

#include "kernels/cpu/kernels_impl.h"

}  // namespace scalar

const CpuKernelTable detail::kScalarKernels = scalar::make_table<scalar::Simd>("scalar");

}  // namespace chatflow::kernels
