// A finished request as OpenTelemetry spans: the SERVER span of the HTTP exchange (method, route,
// status, request id, tenant, A/B arm, and the GenAI semantic conventions' gen_ai.* attributes),
// an INTERNAL child per stage that ran (its time, the port it took, the notes it left), the
// engine's queue, prefill and decode as children, and the spans other code opened on the
// request's trace (an upstream call's CLIENT span).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/api/request.h"
#include "framework/loading/pipeline_spec.h"
#include "framework/server/forwarded.h"

namespace chatflow::server {

// What the server knows of the HTTP exchange beside the request.
struct TracedExchange {
  std::string method;
  std::string route;  // the route's pattern, e.g. /v1/chat/completions
  std::string path;
  ExchangeAddresses addresses;
  int status = 0;
  int64_t received_ns = 0;  // steady clock: the HTTP request was read
  int64_t first_token_ns = 0;
};

// Needs request.trace; call once nothing writes to the request any more (Sink::on_released).
std::vector<SpanRecord> request_spans(const Request& request, const PipelineSpec& spec,
                                      const TracedExchange& exchange);

}  // namespace chatflow::server
