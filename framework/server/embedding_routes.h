// POST /v1/embeddings (OpenAI's shape) and POST /v1/rerank (the Jina/Cohere shape vLLM and
// llama.cpp serve), answered from the serving pipeline's `embedder` resources outside the
// pipeline's stages, after the same credentials check as every other side route.
#pragma once

#include "framework/server/routes.h"

namespace chatflow::server {

// Throw RequestFailure (OpenAI's error shape) for a refusal.
Response embeddings(const RouteCall& call);
Response rerank(const RouteCall& call);

}  // namespace chatflow::server
