// The server's routes in one table: path, method, who may call it, and what answers it. The
// completion routes go into the pipeline (generation_exchange.cpp); every other endpoint is a
// function from the call to a Response, with no socket in sight, so it can be tested alone.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "framework/api/request.h"
#include "framework/server/http_response.h"
#include "framework/server/metrics.h"
#include "framework/server/served_pipeline.h"

namespace chatflow::responses {
class ResponseStore;
}

namespace chatflow::server {
class DashboardHistory;
class ModelRouter;
}  // namespace chatflow::server

namespace chatflow::server {

// Who may call a route.
enum class Access {
  pipeline,  // the pipeline's own auth stage decides (the completion routes)
  key,       // a key the pipeline's auth accepts, unless the path is one of its public paths
  admin,     // such a key with the admin role
};

enum class RouteKind {
  generation,  // a Request through the pipeline
  reload,      // rebuilds the pipeline in the background, answers when done
  side,        // answered at once by `endpoint`
};

enum class ServerPhase { loading, serving, draining };

// What a side endpoint sees of its call.
struct RouteCall {
  const ServedPipeline* served = nullptr;  // null while the first pipeline loads
  Identity caller;                         // empty when the pipeline has no auth
  std::string parameter;                   // the {id} of a pattern route
  std::string query;
  std::string body;
  ServerPhase phase = ServerPhase::serving;
  bool public_path = false;  // the pipeline's auth lists the path as open: no credentials asked
  const MetricsRegistry* metrics = nullptr;
  responses::ResponseStore* responses = nullptr;        // the Responses API's kept responses
  const DashboardHistory* dashboard_history = nullptr;  // the server's samples of `metrics`
  std::string client_address;  // the client (behind a trusted proxy: the forwarded address)
  std::string request_id;      // the caller's X-Request-Id; empty when it sent none
  // A call the pipeline's gates admitted or refused (embeddings, rerank: side_gates.h): its
  // answer gets the request's header fields (x-ratelimit-*, retry-after), the access log its
  // caller, tokens and notes; letting it go settles what the gates held.
  mutable std::shared_ptr<Request> gated;
  std::string content_type;  // a Route::multipart route's form: the header with its boundary
  const ModelRouter* model_router = nullptr;  // the serve file's `models:`; null without them
};

// Throws RequestFailure for a refusal (it becomes an OpenAI error response).
using SideEndpoint = Response (*)(const RouteCall& call);

struct Route {
  std::string_view pattern;  // exact, or ending in "{id}": the rest of the path, not empty
  std::string_view method;
  Access access = Access::key;
  RouteKind kind = RouteKind::side;
  SideEndpoint endpoint = nullptr;
  RequestKind generation = RequestKind::chat;
  bool needs_pipeline = true;      // answered 503 (model_loading) until a pipeline serves
  bool takes_body = false;         // reads the body; other routes answer without reading one
  bool body_optional = false;      // may come without a body (and so without a Content-Type)
  bool off_io_thread = false;      // may take long (big inputs, a database): run on a worker
  std::string_view admin_refusal;  // Access::admin: the 403's message
  Wire wire = Wire::openai;        // a generation route's protocol (its body, answer, errors)
  bool multipart = false;          // takes multipart/form-data as well as JSON (uploads)
};

std::span<const Route> routes();

// The (first) route serving `path` (trailing slashes already removed), its {id} into
// `parameter`; or nullptr. route_for_method picks the one for the request's method.
const Route* find_route(std::string_view path, std::string& parameter);

// The route of `route`'s pattern that answers `method` (a path may have a route per method), or
// `route` itself when none does: then the answer is a 405 naming allowed_methods(route).
const Route& route_for_method(const Route& route, std::string_view method);
// The methods `route`'s pattern answers to: "GET, PATCH, DELETE".
std::string allowed_methods(const Route& route);

// 403 unless the caller may use an admin route (always, when the pipeline has no auth or lists
// the path among its public paths).
void require_admin(const Route& route, const RouteCall& call);

}  // namespace chatflow::server
