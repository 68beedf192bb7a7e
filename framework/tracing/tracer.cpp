#include "framework/tracing/tracer.h"

#include "framework/tracing/traceparent.h"

namespace chatflow::tracing {

Tracer::Tracer(ExporterSettings exporter, double sampling_ratio)
    : sampler_(sampling_ratio), exporter_(std::move(exporter)) {}

std::shared_ptr<RequestTrace> Tracer::start_request(
    std::optional<std::string_view> traceparent, std::optional<std::string_view> tracestate) const {
  std::optional<SpanContext> parent;
  if (traceparent) parent = parse_traceparent(*traceparent, tracestate.value_or(""));
  SpanContext server_span;
  SpanId parent_span_id{};
  if (parent) {
    server_span.trace_id = parent->trace_id;
    server_span.sampled = parent->sampled;
    server_span.trace_state = std::move(parent->trace_state);
    parent_span_id = parent->span_id;
  } else {
    server_span.trace_id = random_trace_id();
    server_span.sampled = sampler_.sampled(server_span.trace_id);
  }
  server_span.span_id = random_span_id();
  return std::make_shared<RequestTrace>(std::move(server_span), parent_span_id);
}

}  // namespace chatflow::tracing
