// Spans as an OTLP ExportTraceServiceRequest in protobuf's wire format, the body OTLP/HTTP sends
// as application/x-protobuf (opentelemetry/proto/collector/trace/v1/trace_service.proto). Written
// by hand: the request uses a handful of message types, and a protobuf library would be a
// dependency for 150 lines of varints and length prefixes.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "framework/api/trace.h"

namespace chatflow::tracing {

// Who sends the spans: the resource (service.name and the like) and the instrumentation scope.
struct SpanSource {
  std::vector<SpanAttribute> resource_attributes;
  std::string scope_name = "chatflow";
  std::string scope_version;
};

// One ResourceSpans with one ScopeSpans holding `spans`, in order.
std::string encode_export_request(const SpanSource& source, std::span<const SpanRecord> spans);

}  // namespace chatflow::tracing
