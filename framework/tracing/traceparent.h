// The W3C Trace Context headers a request may come with: `traceparent` (the caller's trace id,
// its span id, the sampled flag) and `tracestate` (vendors' entries, passed on unchanged).
#pragma once

#include <optional>
#include <string_view>

#include "framework/api/trace.h"

namespace chatflow::tracing {

// The caller's span from a traceparent value, or nullopt for anything W3C calls invalid (a
// wrong length or version, upper-case or non-hex digits, an all-zero id, version ff): such a
// header is ignored, the request starts a trace of its own. `tracestate` is kept when it is a
// plausible header value (printable ASCII, at most 512 characters), dropped otherwise.
std::optional<SpanContext> parse_traceparent(std::string_view traceparent,
                                             std::string_view tracestate = {});

}  // namespace chatflow::tracing
