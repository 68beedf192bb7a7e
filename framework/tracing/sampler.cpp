#include "framework/tracing/sampler.h"

#include <cmath>

namespace chatflow::tracing {
namespace {

constexpr uint64_t kRandomnessRange = uint64_t{1} << 56;

}  // namespace

RatioSampler::RatioSampler(double ratio) {
  ratio = std::isnan(ratio) ? 0 : std::fmin(1.0, std::fmax(0.0, ratio));
  rejection_threshold_ =
      static_cast<uint64_t>(std::llround((1.0 - ratio) * static_cast<double>(kRandomnessRange)));
}

bool RatioSampler::sampled(const TraceId& trace_id) const {
  uint64_t randomness = 0;
  for (size_t i = 9; i < trace_id.size(); ++i)
    randomness = randomness << 8 | trace_id[i];
  return randomness >= rejection_threshold_;
}

}  // namespace chatflow::tracing
