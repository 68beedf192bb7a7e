// The server's tracing: for each request, continue the caller's trace (an incoming traceparent)
// or start one, decide whether it is recorded (parent-based, else by ratio), and send the spans
// of finished requests to the collector (span_exporter.h).
#pragma once

#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "framework/api/trace.h"
#include "framework/tracing/sampler.h"
#include "framework/tracing/span_exporter.h"

namespace chatflow::tracing {

class Tracer {
 public:
  Tracer(ExporterSettings exporter, double sampling_ratio);

  // The trace of a new request: continued from `traceparent` when that is valid (same trace id,
  // its span as the parent, its sampled flag obeyed), else a new trace sampled by the ratio.
  std::shared_ptr<RequestTrace> start_request(std::optional<std::string_view> traceparent,
                                              std::optional<std::string_view> tracestate) const;

  // Queues a finished request's spans for export (never blocks).
  void finish(std::vector<SpanRecord> spans) { exporter_.offer(std::move(spans)); }
  // Flushes what it can within the exporter's timeout.
  void shutdown() { exporter_.shutdown(); }

  const SpanExporter& exporter() const { return exporter_; }

 private:
  RatioSampler sampler_;
  SpanExporter exporter_;
};

}  // namespace chatflow::tracing
