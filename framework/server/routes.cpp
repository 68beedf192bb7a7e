#include "framework/server/routes.h"

#include <algorithm>

#include <boost/json.hpp>

#include "framework/openai/openai_protocol.h"

namespace chatflow::server {
namespace json = boost::json;
namespace {

// How long after a store lost a write /health says degraded: long enough for a load balancer's
// checks to see it, short enough that a passing fault does not pull the server out for good.
constexpr int64_t kDegradedSeconds = 60;

Response health(const RouteCall& call) {
  switch (call.phase) {
    case ServerPhase::draining:
      return Response(503, R"({"status":"draining"})");
    case ServerPhase::loading:
      return Response(503, R"({"status":"loading"})");
    case ServerPhase::serving:
      break;
  }
  json::array failing;
  if (call.served) {
    for (const StorageHealth* store : call.served->storage) {
      StorageStatus status = store->storage_status();
      if (status.last_failure_time > 0 &&
          unix_seconds() - status.last_failure_time < kDegradedSeconds) {
        failing.push_back(json::object{{"store", status.store},
                                       {"lost_writes", status.lost_writes},
                                       {"last_failure", status.last_failure_time}});
      }
    }
  }
  if (!failing.empty()) {
    return Response(
        503, json::serialize(json::object{{"status", "degraded"}, {"failing_stores", failing}}));
  }
  return Response(200, R"({"status":"ok"})");
}

Response metrics(const RouteCall& call) {
  return Response(200, call.metrics->render(), "text/plain; version=0.0.4; charset=utf-8");
}

json::object model_object(const ServedPipeline& served, const std::string& id) {
  json::object object{{"id", id},
                      {"object", "model"},
                      {"created", served.created},
                      {"owned_by", "chatflow"},
                      {"root", id}};
  if (const ServedModel* model = served.model(id)) {
    object["max_model_len"] = model->context_length();
  }
  return object;
}

Response models(const RouteCall& call) {
  json::array data;
  for (const auto& id : call.served->model_ids)
    data.push_back(model_object(*call.served, id));
  return Response(200, json::serialize(json::object{{"object", "list"}, {"data", data}}));
}

Response model_info(const RouteCall& call) {
  const auto& ids = call.served->model_ids;
  if (std::find(ids.begin(), ids.end(), call.parameter) == ids.end()) {
    throw RequestFailure(make_error(404, "invalid_request_error",
                                    "The model '" + call.parameter + "' does not exist",
                                    "model_not_found", "model"));
  }
  return Response(200, json::serialize(model_object(*call.served, call.parameter)));
}

const ServedModel& tokenizer_model(const ServedPipeline& served, const std::string& id) {
  const ServedModel* model = served.model(id);
  if (!model && !id.empty() && !served.models.empty()) {
    throw RequestFailure(make_error(404, "invalid_request_error",
                                    "The model '" + id + "' does not exist", "model_not_found",
                                    "model"));
  }
  if (!model) {
    throw RequestFailure(make_error(400, "invalid_request_error",
                                    "the served pipeline has no model with a tokenizer",
                                    "no_tokenizer"));
  }
  return *model;
}

// What one /tokenize or /detokenize call may ask for: far more than any context, far less than
// what would keep a worker busy for long.
constexpr size_t kMaxTokenizeBytes = 1 << 20;
constexpr size_t kMaxDetokenizeTokens = 1 << 20;

Response tokenize(const RouteCall& call) {
  openai::TokenizeRequest request = openai::parse_tokenize_request(call.body);
  if (request.text.size() > kMaxTokenizeBytes) {
    throw RequestFailure(make_error(400, "invalid_request_error",
                                    "the text to tokenize is " +
                                        std::to_string(request.text.size()) + " bytes; at most " +
                                        std::to_string(kMaxTokenizeBytes) + " are accepted",
                                    "input_too_large", "prompt"));
  }
  const ServedModel& model = tokenizer_model(*call.served, request.model);
  std::vector<int32_t> tokens = model.tokenize(request.text, request.add_special, false);
  json::array ids;
  for (int32_t token : tokens)
    ids.push_back(token);
  json::object response{{"tokens", ids},
                        {"count", static_cast<int64_t>(tokens.size())},
                        {"max_model_len", model.context_length()}};
  return Response(200, json::serialize(response));
}

Response detokenize(const RouteCall& call) {
  openai::DetokenizeRequest request = openai::parse_detokenize_request(call.body);
  if (request.tokens.size() > kMaxDetokenizeTokens) {
    throw RequestFailure(make_error(400, "invalid_request_error",
                                    "at most " + std::to_string(kMaxDetokenizeTokens) +
                                        " tokens are detokenized at once, got " +
                                        std::to_string(request.tokens.size()),
                                    "input_too_large", "tokens"));
  }
  const ServedModel& model = tokenizer_model(*call.served, request.model);
  std::string text;
  try {
    text = model.detokenize(request.tokens);
  } catch (const std::out_of_range& error) {
    throw RequestFailure(
        make_error(400, "invalid_request_error", error.what(), "invalid_token", "tokens"));
  }
  return Response(200, json::serialize(json::object{{"prompt", text}}));
}

// GET /v1/usage[?tenant=T]: admins see any tenant (or all), others their own.
Response usage(const RouteCall& call) {
  const ServedPipeline& served = *call.served;
  if (!served.usage) {
    throw RequestFailure(make_error(404, "invalid_request_error",
                                    "this pipeline keeps no usage ledger (add a quota stage)",
                                    "not_found"));
  }
  std::string tenant = query_value(call.query, "tenant");
  if (served.authenticator && !call.caller.has_role("admin")) {
    if (!tenant.empty() && tenant != call.caller.tenant) {
      throw RequestFailure(make_error(403, "permission_error",
                                      "only admins may read another tenant's usage", "forbidden"));
    }
    tenant = call.caller.tenant;
  }
  return Response(200, served.usage->usage_json(tenant));
}

// GET /v1/sessions/{id}[?user=U | ?key=ID]: the caller's own session; admins may read another
// owner's session of their tenant by naming the owner. Another owner's session answers 404, as
// one that does not exist: its id tells nothing.
Response session(const RouteCall& call) {
  if (!call.served->history) {
    throw RequestFailure(make_error(404, "invalid_request_error",
                                    "this pipeline keeps no session history (add a "
                                    "history_store)",
                                    "not_found"));
  }
  std::string owner = call.caller.owner();
  std::string user = query_value(call.query, "user");
  std::string key = query_value(call.query, "key");
  if (!user.empty() || !key.empty()) {
    if (call.served->authenticator && !call.caller.has_role("admin")) {
      throw RequestFailure(make_error(403, "permission_error",
                                      "only admins may read another user's sessions", "forbidden"));
    }
    owner = !user.empty() ? "user:" + user : "key:" + key;
  }
  auto found = call.served->history->session_json(call.caller.tenant, owner, call.parameter);
  if (!found) {
    throw RequestFailure(make_error(404, "invalid_request_error",
                                    "no session '" + call.parameter + "'", "session_not_found",
                                    "id"));
  }
  return Response(200, *found);
}

// DELETE /v1/cache: admins correct cached answers (a tenant's conversation, or all of it).
Response forget(const RouteCall& call) {
  CacheCorrection correction = openai::parse_cache_correction(call.body);
  if (correction.tenant.empty()) correction.tenant = call.caller.tenant;
  json::object deleted;
  for (CacheAdmin* cache : call.served->caches) {
    deleted[cache->cache_name()] = static_cast<int64_t>(cache->forget(correction));
  }
  return Response(200, json::serialize(json::object{{"deleted", deleted}}));
}

// GCC 12 reports every member a designated initializer leaves out, even those with a default.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
constexpr Route kRoutes[] = {
    {.pattern = "/v1/chat/completions",
     .method = "POST",
     .access = Access::pipeline,
     .kind = RouteKind::generation,
     .generation = RequestKind::chat},
    {.pattern = "/v1/completions",
     .method = "POST",
     .access = Access::pipeline,
     .kind = RouteKind::generation,
     .generation = RequestKind::completion},
    {.pattern = "/v1/models", .method = "GET", .endpoint = models},
    {.pattern = "/v1/models/{id}", .method = "GET", .endpoint = model_info},
    {.pattern = "/health", .method = "GET", .endpoint = health, .needs_pipeline = false},
    // Every tenant's name and usage are in there: admins only, or a separate metrics_listen.
    {.pattern = "/metrics",
     .method = "GET",
     .access = Access::admin,
     .endpoint = metrics,
     .needs_pipeline = false,
     .admin_refusal = "only admins may read /metrics (or serve it on server.metrics_listen)"},
    {.pattern = "/tokenize", .method = "POST", .endpoint = tokenize, .off_io_thread = true},
    {.pattern = "/detokenize", .method = "POST", .endpoint = detokenize, .off_io_thread = true},
    {.pattern = "/v1/usage", .method = "GET", .endpoint = usage, .off_io_thread = true},
    {.pattern = "/v1/sessions/{id}", .method = "GET", .endpoint = session, .off_io_thread = true},
    {.pattern = "/v1/cache",
     .method = "DELETE",
     .access = Access::admin,
     .endpoint = forget,
     .off_io_thread = true,
     .admin_refusal = "only admins may correct caches"},
    {.pattern = "/admin/reload",
     .method = "POST",
     .access = Access::admin,
     .kind = RouteKind::reload,
     .body_optional = true,
     .admin_refusal = "only admins may reload the pipeline"},
};
#pragma GCC diagnostic pop

}  // namespace

std::span<const Route> routes() {
  return kRoutes;
}

const Route* find_route(std::string_view path, std::string& parameter) {
  constexpr std::string_view kParameter = "{id}";
  for (const Route& route : kRoutes) {
    std::string_view pattern = route.pattern;
    if (pattern.ends_with(kParameter)) {
      std::string_view prefix = pattern.substr(0, pattern.size() - kParameter.size());
      if (path.size() > prefix.size() && path.starts_with(prefix)) {
        parameter = std::string(path.substr(prefix.size()));
        return &route;
      }
    } else if (path == pattern) {
      parameter.clear();
      return &route;
    }
  }
  return nullptr;
}

void require_admin(const Route& route, const RouteCall& call) {
  if (route.access != Access::admin || call.public_path) return;
  if (call.served && call.served->authenticator && !call.caller.has_role("admin")) {
    throw RequestFailure(
        make_error(403, "permission_error", std::string(route.admin_refusal), "forbidden"));
  }
}

}  // namespace chatflow::server
