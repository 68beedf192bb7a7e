// Which traces are recorded: a ratio, decided from the trace id alone, so every service that
// sees the same trace id with the same ratio decides the same way (OpenTelemetry's
// TraceIdRatioBased, with the rejection threshold of its probability sampling: the trace id's
// rightmost 56 bits, the part W3C Trace Context level 2 makes random, against (1 - ratio) * 2^56).
#pragma once

#include <cstdint>

#include "framework/api/trace.h"

namespace chatflow::tracing {

class RatioSampler {
 public:
  // `ratio` in [0, 1]: 0 records nothing, 1 everything.
  explicit RatioSampler(double ratio);

  bool sampled(const TraceId& trace_id) const;

 private:
  uint64_t rejection_threshold_;  // sampled when the trace id's 56 random bits are >= this
};

}  // namespace chatflow::tracing
