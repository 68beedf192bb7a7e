// The ratio sampler: decided by the trace id alone, the same way every time and everywhere.
#include "framework/tracing/sampler.h"

#include <gtest/gtest.h>

namespace chatflow::tracing {
namespace {

// A trace id whose rightmost 7 bytes (the randomness the threshold is compared with) are
// `randomness`, big-endian, and whose other bytes are not zero.
TraceId with_randomness(uint64_t randomness) {
  TraceId id{};
  id.fill(0xab);
  for (int i = 0; i < 7; ++i)
    id[15 - i] = static_cast<uint8_t>(randomness >> (8 * i));
  return id;
}

TEST(RatioSampler, OneSamplesEveryTraceAndZeroNone) {
  RatioSampler all(1.0);
  RatioSampler none(0.0);
  for (uint64_t randomness :
       {uint64_t{0}, uint64_t{1}, (uint64_t{1} << 55), (uint64_t{1} << 56) - 1}) {
    EXPECT_TRUE(all.sampled(with_randomness(randomness))) << randomness;
    EXPECT_FALSE(none.sampled(with_randomness(randomness))) << randomness;
  }
}

TEST(RatioSampler, AHalfSamplesTheUpperHalfOfTheRandomness) {
  RatioSampler half(0.5);
  // Threshold (1 - 0.5) * 2^56 = 2^55: at or above it is sampled.
  EXPECT_FALSE(half.sampled(with_randomness((uint64_t{1} << 55) - 1)));
  EXPECT_TRUE(half.sampled(with_randomness(uint64_t{1} << 55)));
  EXPECT_TRUE(half.sampled(with_randomness((uint64_t{1} << 56) - 1)));
  EXPECT_FALSE(half.sampled(with_randomness(0)));
}

TEST(RatioSampler, TheLeftmostBytesDoNotDecide) {
  RatioSampler half(0.5);
  TraceId low = with_randomness(0);
  TraceId high = low;
  for (int i = 0; i < 9; ++i)
    high[i] = 0xff;
  EXPECT_EQ(half.sampled(low), half.sampled(high));
}

TEST(RatioSampler, TheSameIdGetsTheSameDecision) {
  RatioSampler first(0.25);
  RatioSampler second(0.25);
  for (int i = 0; i < 1000; ++i) {
    TraceId id = random_trace_id();
    bool decision = first.sampled(id);
    EXPECT_EQ(decision, first.sampled(id));
    EXPECT_EQ(decision, second.sampled(id));
  }
}

TEST(RatioSampler, AQuarterSamplesAboutAQuarterOfRandomTraces) {
  RatioSampler quarter(0.25);
  int sampled = 0;
  constexpr int kTraces = 20000;
  for (int i = 0; i < kTraces; ++i)
    sampled += quarter.sampled(random_trace_id()) ? 1 : 0;
  // 5,000 expected; the standard deviation is about 61.
  EXPECT_GT(sampled, 4500);
  EXPECT_LT(sampled, 5500);
}

}  // namespace
}  // namespace chatflow::tracing
