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

}  // namespace chatflow::server
