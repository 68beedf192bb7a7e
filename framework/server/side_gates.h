// The pipeline's gates for the calls answered beside its graph (POST /v1/embeddings and
// /v1/rerank): rate limits with the input's tokens counted, the quota and its usage ledger, and
// input moderation of every text, each gate stage in pipeline order (limits::SideRequestGate).
// The caller was authenticated before the body was read, as on every route.
#pragma once

#include <string>
#include <vector>

#include "framework/server/request_spans.h"
#include "framework/server/routes.h"
#include "framework/tracing/tracer.h"

namespace chatflow::server {

// Admits a call for `model` that reads `texts`, `tokens` of them in all, or throws
// RequestFailure with the refusal (its header fields, such as Retry-After, come with the answer
// through call.gated). On success call.gated holds the admitted request until the answer is
// written: the access log reads its caller and tokens, and letting it go settles what the gates
// held (a rate limit's unused tokens, the ledger's entry).
// `texts_param`: the body's member a content filter's refusal names ("input"; "" for several).
void admit_side_call(const RouteCall& call, const std::string& model,
                     const std::vector<std::string>& texts, int64_t tokens,
                     const std::string& texts_param);

// Exports the SERVER span of a gated call (`request`, once answered) when `tracer` samples it,
// continued from the client's traceparent in `headers`: the exchange, the caller, the embedder
// as gen_ai.request.model with gen_ai.operation.name "embeddings" (rerank: "rerank"), the input's
// tokens, the gates' notes, and `error`'s code for a refusal.
void trace_side_call(Request& request, tracing::Tracer& tracer, const HeaderFields& headers,
                     const PipelineSpec& spec, const TracedExchange& exchange,
                     const RequestError* error);

}  // namespace chatflow::server
