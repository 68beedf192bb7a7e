// The body chatflow sends an OpenAI-compatible engine for one request: the conversation (after
// the pipeline's stages: trimmed history, retrieved context) and the caller's sampling, tools and
// response format as the client gave them, always streamed with usage
// (stream_options.include_usage), whatever the client asked: chatflow re-frames the stream for
// the client, or collects it into one response.
#pragma once

#include <string>

#include "framework/api/request.h"

namespace chatflow::upstream {

// POST target below the endpoint's base path: /v1/chat/completions or /v1/completions.
std::string request_path(const Request& request);

// `model`: the name the engine knows the model by; `max_tokens`: the bound sent (what the gates
// reserved), or 0 to send none, so that the engine fills its context as the client asked.
std::string request_body(const Request& request, const std::string& model, int64_t max_tokens);

}  // namespace chatflow::upstream
