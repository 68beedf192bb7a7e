// POST /admin/prefix_cache/save and POST /admin/prefix_cache/clear: admins write a model's prefix
// cache to its kv_cache.persist file now (before a deploy that kills rather than drains), or
// forget it and that file (after a change the cached prompts must not survive).
#pragma once

#include "framework/server/routes.h"

namespace chatflow::server {

// Throw RequestFailure (OpenAI's error shape) for a refusal.
Response save_prefix_cache(const RouteCall& call);
Response clear_prefix_cache(const RouteCall& call);

}  // namespace chatflow::server
