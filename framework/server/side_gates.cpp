#include "framework/server/side_gates.h"

#include "framework/limits/side_request_gate.h"
#include "framework/runtime/pipeline.h"

namespace chatflow::server {

void admit_side_call(const RouteCall& call, const std::string& model,
                     const std::vector<std::string>& texts, int64_t tokens,
                     const std::string& texts_param) {
  auto request = std::make_shared<Request>();
  request->id = call.request_id.empty() ? random_id("emb-") : call.request_id;
  request->request_id = request->id;
  request->identity = call.caller;
  request->client_address = call.client_address;
  request->model = model;
  request->stream = false;
  for (const std::string& text : texts)
    request->messages.push_back(Message{"user", text});
  request->usage.prompt_tokens = tokens;
  call.gated = request;
  try {
    for (auto* gate : call.served->pipeline->find_all<limits::SideRequestGate>())
      gate->admit_side_request(*request);
  } catch (const RequestFailure& failure) {
    // Refused: nothing was spent, so the gates that admitted it give back what they held.
    request->usage.prompt_tokens = 0;
    RequestError error = failure.error();
    // The texts are the body's `input` (or `query` and `documents`), not chat's messages.
    if (error.param == "messages") error.param = texts_param;
    throw RequestFailure(std::move(error));
  }
}

void trace_side_call(Request& request, tracing::Tracer& tracer, const HeaderFields& headers,
                     const PipelineSpec& spec, const TracedExchange& exchange,
                     const RequestError* error) {
  request.headers = headers;
  request.trace = tracer.start_request(request.header("traceparent"), request.header("tracestate"));
  if (!request.trace || !request.trace->sampled()) return;
  std::vector<SpanRecord> spans = request_spans(request, spec, exchange);
  auto& attributes = spans.front().attributes;
  for (SpanAttribute& attribute : attributes) {
    if (attribute.key == "gen_ai.operation.name")
      attribute.value = std::string(exchange.route == "/v1/rerank" ? "rerank" : "embeddings");
  }
  if (error) attributes.push_back({"error.type", error->code.empty() ? error->type : error->code});
  tracer.finish(std::move(spans));
}

}  // namespace chatflow::server
