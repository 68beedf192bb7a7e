// The gates of a pipeline (rate_limit, quota, input_moderation) for the requests the server
// answers beside the pipeline's graph, POST /v1/embeddings and POST /v1/rerank: those have no
// answer to generate, so they do not flow through the model's stages, but a deployment's limits,
// allowance, usage ledger and content filter apply to them as to a chat completion. The server
// finds every stage implementing this (Pipeline::find_all, in pipeline order) and asks each to
// admit the request before it computes the answer.
#pragma once

#include "framework/api/request.h"

namespace chatflow::limits {

class SideRequestGate {
 public:
  virtual ~SideRequestGate() = default;
  // Admits `request` or throws RequestFailure (429 with a retry-after response header, 403,
  // 400...). The request comes with its caller (identity, client address), id, model, its texts
  // as user messages and `usage.prompt_tokens` already counted: the tokens it spends, all of
  // them, with no answer after them. What a gate holds for it (a rate limit's tokens, a quota's
  // reservation) is settled when the request is released (Request::on_release), from its usage
  // then. May wait (a moderation provider's verdict): the server calls it on a worker thread.
  virtual void admit_side_request(Request& request) = 0;
};

}  // namespace chatflow::limits
