// GET and DELETE /v1/responses/{id}: the responses a caller kept (`store`, the Responses API's
// default), from the server's response store (framework/responses/response_store.h). A response
// kept by another owner answers as one that does not exist.
#pragma once

#include "framework/server/routes.h"

namespace chatflow::server {

// Throw RequestFailure (OpenAI's error shape) for a refusal.
Response get_response(const RouteCall& call);
Response delete_response(const RouteCall& call);

}  // namespace chatflow::server
