// The quantised block formats: every type's blocks read back as the GGUF format defines them
// (checked against a decoder written here, in ggml's own loop order, on random bytes), and
// quantising never loses more than plain rounding.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/half.h"
#include "kernels/quantize.h"
#include "kernels/tensor_type.h"

namespace chatflow::kernels {
namespace {

constexpr int8_t kLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                1,    13,   25,  38,  53,  69,  89,  113};

double half_value(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return f16_to_f32(bits);
}

// The bytes of one block: random, with each f16 field a finite value of moderate size.
std::vector<uint8_t> random_block(TensorType type, std::mt19937& random) {
  std::vector<uint8_t> block(block_bytes(type));
  for (uint8_t& byte : block)
    byte = static_cast<uint8_t>(random());
  std::uniform_real_distribution<float> scale(-2.0f, 2.0f);
  auto put_half = [&](size_t offset) {
    uint16_t bits = f32_to_f16(scale(random));
    std::memcpy(block.data() + offset, &bits, 2);
  };
  switch (type) {
    case TensorType::q4_1:
    case TensorType::q5_1:
      put_half(2);
      [[fallthrough]];
    case TensorType::q4_0:
    case TensorType::q5_0:
    case TensorType::q8_0:
    case TensorType::iq4_nl:
    case TensorType::iq4_xs:
      put_half(0);
      break;
    case TensorType::q2_k:
      put_half(80);
      put_half(82);
      break;
    case TensorType::q3_k:
      put_half(108);
      break;
    case TensorType::q4_k:
    case TensorType::q5_k:
      put_half(0);
      put_half(2);
      break;
    case TensorType::q6_k:
      put_half(208);
      break;
    default:
      break;
  }
  return block;
}

void scale_min_k4(int j, const uint8_t* q, int& d, int& m) {
  if (j < 4) {
    d = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
  }
}

// The format definitions, transcribed in ggml's dequantize_row_* loop order.
std::vector<double> expected_values(TensorType type, const uint8_t* x) {
  std::vector<double> y;
  auto nibble_pairs = [&](const uint8_t* qs, auto value) {
    std::vector<double> out(32);
    for (int j = 0; j < 16; ++j) {
      out[j] = value(qs[j] & 0x0F, j);
      out[j + 16] = value(qs[j] >> 4, j + 16);
    }
    return out;
  };
  switch (type) {
    case TensorType::q4_0: {
      double d = half_value(x);
      return nibble_pairs(x + 2, [&](int q, int) { return (q - 8) * d; });
    }
    case TensorType::q4_1: {
      double d = half_value(x), m = half_value(x + 2);
      return nibble_pairs(x + 4, [&](int q, int) { return q * d + m; });
    }
    case TensorType::q5_0:
    case TensorType::q5_1: {
      bool one = type == TensorType::q5_1;
      double d = half_value(x), m = one ? half_value(x + 2) : 0;
      uint32_t qh;
      std::memcpy(&qh, x + (one ? 4 : 2), 4);
      return nibble_pairs(x + (one ? 8 : 6), [&](int q, int i) {
        int full = q | (((qh >> i) & 1) << 4);
        return one ? full * d + m : (full - 16) * d;
      });
    }
    case TensorType::q8_0: {
      double d = half_value(x);
      for (int i = 0; i < 32; ++i)
        y.push_back(d * static_cast<int8_t>(x[2 + i]));
      return y;
    }
    case TensorType::iq4_nl: {
      double d = half_value(x);
      return nibble_pairs(x + 2, [&](int q, int) { return d * kLevels[q]; });
    }
    case TensorType::q2_k: {
      double d = half_value(x + 80), dmin = half_value(x + 82);
      const uint8_t* q = x + 16;
      int is = 0;
      for (int n = 0; n < 256; n += 128) {
        for (int shift = 0; shift < 8; shift += 2) {
          for (int part = 0; part < 2; ++part) {
            uint8_t sc = x[is++];
            for (int l = 0; l < 16; ++l)
              y.push_back(d * (sc & 0xF) * ((q[l + 16 * part] >> shift) & 3) - dmin * (sc >> 4));
          }
        }
        q += 32;
      }
      return y;
    }
    case TensorType::q3_k: {
      double d = half_value(x + 108);
      const uint8_t* hm = x;
      const uint8_t* q = x + 32;
      const uint8_t* s = x + 96;
      int scales[16];
      for (int j = 0; j < 16; ++j) {
        int low = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
        scales[j] = (low | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
      }
      int is = 0;
      uint8_t m = 1;
      for (int n = 0; n < 256; n += 128) {
        for (int shift = 0; shift < 8; shift += 2) {
          for (int part = 0; part < 2; ++part) {
            double dl = d * scales[is++];
            for (int l = 0; l < 16; ++l) {
              int k = l + 16 * part;
              y.push_back(dl * (((q[k] >> shift) & 3) - ((hm[k] & m) ? 0 : 4)));
            }
          }
          m <<= 1;
        }
        q += 32;
      }
      return y;
    }
    case TensorType::q4_k:
    case TensorType::q5_k: {
      bool five = type == TensorType::q5_k;
      double d = half_value(x), dmin = half_value(x + 2);
      const uint8_t* qh = x + 16;
      const uint8_t* q = x + (five ? 48 : 16);
      int is = 0;
      uint8_t u1 = 1, u2 = 2;
      for (int j = 0; j < 256; j += 64) {
        int sc, m;
        scale_min_k4(is, x + 4, sc, m);
        double d1 = d * sc, m1 = dmin * m;
        scale_min_k4(is + 1, x + 4, sc, m);
        double d2 = d * sc, m2 = dmin * m;
        for (int l = 0; l < 32; ++l)
          y.push_back(d1 * ((q[l] & 0xF) + (five && (qh[l] & u1) ? 16 : 0)) - m1);
        for (int l = 0; l < 32; ++l)
          y.push_back(d2 * ((q[l] >> 4) + (five && (qh[l] & u2) ? 16 : 0)) - m2);
        q += 32;
        is += 2;
        u1 <<= 2;
        u2 <<= 2;
      }
      return y;
    }
    case TensorType::q6_k: {
      y.resize(256);
      double d = half_value(x + 208);
      const uint8_t* ql = x;
      const uint8_t* qh = x + 128;
      const int8_t* sc = reinterpret_cast<const int8_t*>(x + 192);
      for (int n = 0; n < 256; n += 128) {
        for (int l = 0; l < 32; ++l) {
          int is = l / 16;
          int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
          int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
          int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
          int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
          y[n + l] = d * sc[is] * q1;
          y[n + l + 32] = d * sc[is + 2] * q2;
          y[n + l + 64] = d * sc[is + 4] * q3;
          y[n + l + 96] = d * sc[is + 6] * q4;
        }
        ql += 64;
        qh += 32;
        sc += 8;
      }
      return y;
    }
    case TensorType::iq4_xs: {
      double d = half_value(x);
      uint16_t scales_h;
      std::memcpy(&scales_h, x + 2, 2);
      const uint8_t* qs = x + 8;
      for (int ib = 0; ib < 8; ++ib) {
        int ls = ((x[4 + ib / 2] >> 4 * (ib % 2)) & 0xF) | (((scales_h >> 2 * ib) & 3) << 4);
        double dl = d * (ls - 32);
        std::vector<double> part = nibble_pairs(qs, [&](int q, int) { return dl * kLevels[q]; });
        y.insert(y.end(), part.begin(), part.end());
        qs += 16;
      }
      return y;
    }
    default:
      return y;
  }
}

const TensorType kQuantized[] = {TensorType::q4_0, TensorType::q4_1, TensorType::q5_0,
                                 TensorType::q5_1, TensorType::q8_0, TensorType::iq4_nl,
                                 TensorType::q2_k, TensorType::q3_k, TensorType::q4_k,
                                 TensorType::q5_k, TensorType::q6_k, TensorType::iq4_xs};

class QuantFormats : public ::testing::TestWithParam<TensorType> {};

TEST_P(QuantFormats, RandomBlocksReadBackAsTheFormatDefines) {
  const TensorType type = GetParam();
  std::mt19937 random(static_cast<uint32_t>(type) * 7919u);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<uint8_t> block = random_block(type, random);
    std::vector<double> expected = expected_values(type, block.data());
    ASSERT_EQ(static_cast<int64_t>(expected.size()), block_values(type));
    std::vector<float> values(expected.size());
    dequantize_row(type, block.data(), block_values(type), values.data());
    double largest = 0;
    for (double value : expected)
      largest = std::max(largest, std::fabs(value));
    for (size_t i = 0; i < expected.size(); ++i)
      ASSERT_NEAR(values[i], expected[i], 1e-6 * largest + 1e-30)
          << to_string(type) << " trial " << trial << " value " << i;
  }
}

// The plain encoding ggml's reference uses for the 32-value types (and a plain per-sub-block
// min/max encoding for the others): what a careful quantiser must never do worse than.
double plain_error(TensorType type, const std::vector<float>& x) {
  double error = 0;
  const int64_t n = block_values(type);
  for (size_t start = 0; start < x.size(); start += static_cast<size_t>(n)) {
    const float* b = x.data() + start;
    if (type == TensorType::q8_0) {
      float amax = 0;
      for (int i = 0; i < 32; ++i)
        amax = std::max(amax, std::fabs(b[i]));
      float d = f16_to_f32(f32_to_f16(amax / 127));
      for (int i = 0; i < 32; ++i) {
        double e = d * std::round(b[i] * 127 / amax) - b[i];
        error += e * e;
      }
    } else if (type == TensorType::q4_0) {
      float extreme = 0;
      for (int i = 0; i < 32; ++i)
        if (std::fabs(b[i]) > std::fabs(extreme)) extreme = b[i];
      float d = extreme / -8;
      float stored = f16_to_f32(f32_to_f16(d));
      for (int i = 0; i < 32; ++i) {
        int q = std::min(15, static_cast<int>(b[i] / d + 8.5f));
        double e = stored * (q - 8) - b[i];
        error += e * e;
      }
    }
  }
  return error;
}

TEST_P(QuantFormats, QuantisingLosesNoMoreThanPlainRounding) {
  const TensorType type = GetParam();
  std::mt19937 random(5);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const int64_t columns = 4096;
  std::vector<float> x(static_cast<size_t>(columns));
  for (float& value : x)
    value = normal(random);
  std::vector<uint8_t> bytes(row_bytes(type, columns));
  quantize_row(type, x.data(), columns, bytes.data());
  std::vector<float> back(x.size());
  dequantize_row(type, bytes.data(), columns, back.data());
  double error = 0, energy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    error += (back[i] - x[i]) * (back[i] - x[i]);
    energy += x[i] * x[i];
  }
  // A uniform quantiser of Gaussian data at b bits per value reaches a relative squared error
  // of about 2.7 * 2^-2b; 8 * 2^-2b leaves room for the scales' bits yet fails a broken encoder.
  double bits =
      8.0 * static_cast<double>(block_bytes(type)) / static_cast<double>(block_values(type));
  double bound = 8.0 * std::pow(2.0, -2.0 * bits);
  EXPECT_LT(error / energy, bound) << to_string(type) << " at " << bits << " bits per value";
  if (type == TensorType::q8_0 || type == TensorType::q4_0) {
    EXPECT_LE(error, plain_error(type, x) * (1 + 1e-6)) << to_string(type);
  }
}

INSTANTIATE_TEST_SUITE_P(AllQuantised, QuantFormats, ::testing::ValuesIn(kQuantized),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(TensorTypes, EveryGgufTypeHasALayoutAndOnlyComputableOnesHaveNames) {
  EXPECT_EQ(block_bytes(*tensor_type_from_id(16)), 66u);  // iq2_xxs: known, not computable
  EXPECT_FALSE(computable(*tensor_type_from_id(16)));
  EXPECT_EQ(tensor_type_name(16), "iq2_xxs");
  EXPECT_FALSE(tensor_type_from_id(4).has_value());  // q4_2, retired
  EXPECT_FALSE(tensor_type_from_id(99).has_value());
  EXPECT_EQ(tensor_type_from_name("Q4_K"), TensorType::q4_k);
  EXPECT_FALSE(tensor_type_from_name("iq2_xxs").has_value());
  EXPECT_EQ(row_bytes(TensorType::q6_k, 512), 420u);
  EXPECT_EQ(row_bytes(TensorType::q5_0, 896), 616u);
}

}  // namespace
}  // namespace chatflow::kernels
