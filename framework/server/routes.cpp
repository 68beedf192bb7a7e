#include "framework/server/routes.h"

#include <algorithm>
#include <optional>

#include <boost/json.hpp>

#include "framework/anthropic/messages_protocol.h"
#include "framework/api/capabilities.h"
#include "framework/history/session_branches.h"
#include "framework/history/session_import.h"
#include "framework/loading/graph_render.h"
#include "framework/openai/openai_protocol.h"
#include "framework/server/dashboard_history.h"
#include "framework/server/document_routes.h"
#include "framework/server/embedding_routes.h"
#include "framework/server/model_routing.h"
#include "framework/server/prefix_cache_routes.h"
#include "framework/server/responses_routes.h"
#include "framework/server/session_import.h"
#include "framework/server/session_search.h"
#include "framework/text/utf8.h"

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
  // Where each model computes: its backend, device and memory.
  json::object backends;
  if (call.served) {
    for (size_t i = 0; i < call.served->models.size(); ++i) {
      EngineStats stats = call.served->models[i]->engine_stats();
      if (stats.backend.empty()) continue;
      backends[call.served->models[i]->model_id()] =
          json::object{{"name", stats.backend},
                       {"device", stats.device},
                       {"memory_bytes", json::object{{"weights", stats.weight_bytes},
                                                     {"kv_pool", stats.kv_pool_bytes},
                                                     {"workspace", stats.workspace_bytes}}}};
    }
  }
  json::object body{{"status", failing.empty() ? "ok" : "degraded"}};
  if (!failing.empty()) body["failing_stores"] = failing;
  if (!backends.empty()) body["backend"] = backends;
  return Response(failing.empty() ? 200 : 503, json::serialize(body));
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
  if (call.model_router) list_routed_models(*call.model_router, call.served->created, data);
  return Response(200, json::serialize(json::object{{"object", "list"}, {"data", data}}));
}

Response model_info(const RouteCall& call) {
  if (call.model_router) {
    if (auto routed = routed_model(*call.model_router, call.served->created, call.parameter))
      return Response(200, json::serialize(*routed));
  }
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

// `text` with each %XX escape made its byte (a '%' without two hex digits stays as it is):
// session ids are any string a client sent as `session_id`, and reach the path URL-encoded.
std::string percent_decoded(std::string_view text) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string decoded;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && hex(text[i + 1]) >= 0 && hex(text[i + 2]) >= 0) {
      decoded += static_cast<char>(hex(text[i + 1]) * 16 + hex(text[i + 2]));
      i += 2;
    } else {
      decoded += text[i];
    }
  }
  return decoded;
}

// GET /v1/usage[?tenant=T]: admins see any tenant (or all), others their own.
Response usage(const RouteCall& call) {
  const ServedPipeline& served = *call.served;
  if (!served.usage) {
    throw RequestFailure(make_error(404, "invalid_request_error",
                                    "this pipeline keeps no usage ledger (add a quota stage)",
                                    "not_found"));
  }
  std::string tenant = percent_decoded(query_value(call.query, "tenant"));
  if (served.authenticator && !call.caller.has_role("admin")) {
    if (!tenant.empty() && tenant != call.caller.tenant) {
      throw RequestFailure(make_error(403, "permission_error",
                                      "only admins may read another tenant's usage", "forbidden"));
    }
    tenant = call.caller.tenant;
  }
  return Response(200, served.usage->usage_json(tenant));
}

// The session the path names.
std::string session_id(const RouteCall& call) {
  return percent_decoded(call.parameter);
}

// The history store of the served pipeline, or the 404 every session route answers without one.
HistoryReader& history_of(const RouteCall& call) {
  if (!call.served->history) {
    throw RequestFailure(make_error(404, "invalid_request_error",
                                    "this pipeline keeps no session history (add a "
                                    "history_store)",
                                    "not_found"));
  }
  return *call.served->history;
}

// Whose sessions a call means: the caller's own, or for an admin the user (?user=U) or the key
// without a user (?key=ID) of their tenant that the query names, URL-encoded (alice%40example.com).
std::string session_owner(const RouteCall& call) {
  std::string user = percent_decoded(query_value(call.query, "user"));
  std::string key = percent_decoded(query_value(call.query, "key"));
  if (user.empty() && key.empty()) {
    // An authenticated caller who owns nothing (a JWT when jwt.user_claim is empty) has no
    // sessions: "" would be every such caller's, each reading the others'.
    if (call.served->authenticator && call.caller.owner().empty()) {
      throw RequestFailure(make_error(403, "permission_error",
                                      "your credential names no user, so there are no sessions of "
                                      "yours: sessions need a token with a user claim or an API "
                                      "key",
                                      "no_session_owner"));
    }
    return call.caller.owner();
  }
  if (call.served->authenticator && !call.caller.has_role("admin")) {
    throw RequestFailure(make_error(403, "permission_error",
                                    "only admins may read another user's sessions", "forbidden"));
  }
  return !user.empty() ? "user:" + user : "key:" + key;
}

// Another owner's session answers as one that does not exist: its id tells nothing.
[[noreturn]] void no_session(const RouteCall& call) {
  throw RequestFailure(make_error(404, "invalid_request_error",
                                  "no session '" + text::repair(session_id(call)) + "'",
                                  "session_not_found", "id"));
}

json::object session_summary_json(const SessionInfo& session) {
  return {{"id", session.id},
          {"object", "session"},
          {"title", session.title},
          {"created_at", session.created_at},
          {"updated_at", session.updated_at},
          {"turns", session.turns}};
}

// GET /v1/sessions/{id}[?user=U | ?key=ID]: the caller's own session; admins may read another
// owner's session of their tenant by naming the owner.
Response session(const RouteCall& call) {
  HistoryReader& history = history_of(call);
  auto found = history.session_json(call.caller.tenant, session_owner(call), session_id(call));
  if (!found) no_session(call);
  return Response(200, *found);
}

// The value of `name` in the query when the query has it at all (even empty), else nullopt.
std::optional<std::string> query_parameter(std::string_view query, std::string_view name) {
  size_t start = 0;
  while (start <= query.size()) {
    size_t end = std::min(query.find('&', start), query.size());
    std::string_view pair = query.substr(start, end - start);
    if (pair == name) return std::string();
    if (pair.size() > name.size() && pair.starts_with(name) && pair[name.size()] == '=')
      return std::string(pair.substr(name.size() + 1));
    start = end + 1;
  }
  return std::nullopt;
}

constexpr size_t kDefaultSessionPage = 50;
constexpr size_t kMaxSessionPage = 200;

size_t session_page_limit(const RouteCall& call) {
  auto text = query_parameter(call.query, "limit");
  if (!text) return kDefaultSessionPage;
  bool digits =
      !text->empty() && text->size() <= 3 &&
      std::all_of(text->begin(), text->end(), [](char c) { return c >= '0' && c <= '9'; });
  size_t limit = digits ? std::stoul(*text) : 0;
  if (limit < 1 || limit > kMaxSessionPage) {
    throw RequestFailure(make_error(400, "invalid_request_error",
                                    "'limit' must be an integer from 1 to " +
                                        std::to_string(kMaxSessionPage) + ", got '" + *text + "'",
                                    "invalid_value", "limit"));
  }
  return limit;
}

// GET /v1/sessions?q=TEXT[&limit=N]: those of the caller's sessions whose title or turns hold
// TEXT (session_search.h), each with where; the first `limit` matches, no paging.
Response session_search(const RouteCall& call, HistoryReader& history, const std::string& owner,
                        size_t limit, const std::string& query) {
  constexpr size_t kMaxQueryBytes = 256;
  if (query.size() > kMaxQueryBytes) {
    throw RequestFailure(make_error(400, "invalid_request_error",
                                    "'q' is " + std::to_string(query.size()) +
                                        " bytes long; a search takes at most " +
                                        std::to_string(kMaxQueryBytes),
                                    "invalid_value", "q"));
  }
  std::string key = search_key(text::repair(query));
  if (key.empty()) {
    throw RequestFailure(make_error(400, "invalid_request_error",
                                    "'q' has nothing to search for: give a word", "invalid_value",
                                    "q"));
  }
  if (query_parameter(call.query, "after")) {
    throw RequestFailure(make_error(400, "invalid_request_error",
                                    "'after' pages the plain list; a search ('q') answers its "
                                    "first 'limit' matches",
                                    "invalid_value", "after"));
  }
  return Response(200,
                  json::serialize(search_sessions(history, call.caller.tenant, owner, key, limit)));
}

// GET /v1/sessions[?limit=N][&after=ID][&user=U | &key=ID]: the caller's sessions, the one
// with the latest turn first; `after` (the last id of the previous page) pages on.
Response sessions(const RouteCall& call) {
  HistoryReader& history = history_of(call);
  size_t limit = session_page_limit(call);
  std::string owner = session_owner(call);
  if (auto query = query_parameter(call.query, "q"))
    return session_search(call, history, owner, limit, percent_decoded(*query));
  std::string after = percent_decoded(query_value(call.query, "after"));
  auto page = history.list_sessions(call.caller.tenant, owner, limit, after);
  if (!page) {
    throw RequestFailure(
        make_error(400, "invalid_request_error",
                   "'after' names no session of yours: '" + text::repair(after) + "'",
                   "invalid_value", "after"));
  }
  json::array data;
  for (const auto& session : page->sessions)
    data.push_back(session_summary_json(session));
  return Response(200, json::serialize(json::object{
                           {"object", "list"}, {"data", data}, {"has_more", page->has_more}}));
}

// DELETE /v1/sessions/{id}: the turns and the title are gone for good; the same id used again
// starts a new session.
Response delete_session(const RouteCall& call) {
  HistoryReader& history = history_of(call);
  if (!history.delete_session(call.caller.tenant, session_owner(call), session_id(call)))
    no_session(call);
  return Response(200, json::serialize(json::object{{"id", text::repair(session_id(call))},
                                                    {"object", "session.deleted"},
                                                    {"deleted", true}}));
}

// DELETE /v1/sessions[?user=U | ?key=ID]: every session of the caller (for an admin, of the
// owner the query names) is gone for good; answers how many there were.
Response delete_sessions(const RouteCall& call) {
  HistoryReader& history = history_of(call);
  for (std::string_view name : {"user", "key"}) {
    auto value = query_parameter(call.query, name);
    if (value && value->empty()) {
      throw RequestFailure(make_error(400, "invalid_request_error",
                                      "'" + std::string(name) + "' names no one: give a value",
                                      "invalid_value", std::string(name)));
    }
  }
  int64_t deleted = history.delete_sessions(call.caller.tenant, session_owner(call));
  return Response(
      200, json::serialize(json::object{{"object", "sessions.deleted"}, {"deleted", deleted}}));
}

// GET /v1/sessions:export[?user=U | ?key=ID]: every session of the caller (an admin: of the
// owner named) with all its turns, as JSON Lines, latest activity first.
Response export_sessions(const RouteCall& call) {
  HistoryReader& history = history_of(call);
  std::string body;
  history.export_sessions(call.caller.tenant, session_owner(call),
                          [&](const std::string& line) { body += line; });
  return Response(200, std::move(body), "application/x-ndjson");
}

// The turn of PATCH {"active_turn": N}, or nullopt when the body does not name one (a rename).
std::optional<int64_t> requested_active_turn(std::string_view body) {
  json::error_code error;
  json::value document = json::parse(body, error);
  if (error || !document.is_object()) return std::nullopt;
  const json::object& fields = document.get_object();
  const json::value* turn = fields.if_contains("active_turn");
  if (!turn) return std::nullopt;
  for (const auto& field : fields) {
    if (field.key() == "active_turn") continue;
    throw RequestFailure(make_error(400, "invalid_request_error",
                                    "'active_turn' goes alone: send '" + text::repair(field.key()) +
                                        "' in a request of its own",
                                    "invalid_value", text::repair(field.key())));
  }
  if (!turn->is_int64() || turn->get_int64() < 1) {
    throw RequestFailure(make_error(
        400, "invalid_request_error",
        "'active_turn' must be a turn's id (an integer from 1), got " + json::serialize(*turn),
        "invalid_value", "active_turn"));
  }
  return turn->get_int64();
}

// PATCH /v1/sessions/{id} {"active_turn": N}: the session shows the branch through turn N (and a
// request without parent_turn continues it); answers the session as GET does.
Response show_branch(const RouteCall& call, HistoryReader& history, int64_t turn) {
  auto* branches = dynamic_cast<SessionBranches*>(&history);
  if (!branches) {
    throw RequestFailure(make_error(404, "invalid_request_error",
                                    "this pipeline's history store keeps no branches",
                                    "not_found"));
  }
  std::string owner = session_owner(call);
  switch (branches->show_turn(call.caller.tenant, owner, session_id(call), turn)) {
    case SessionBranches::Shown::no_session:
      no_session(call);
    case SessionBranches::Shown::no_turn:
      throw RequestFailure(make_error(
          400, "invalid_request_error",
          "session '" + text::repair(session_id(call)) + "' has no turn " + std::to_string(turn),
          "invalid_value", "active_turn"));
    case SessionBranches::Shown::shown:
      break;
  }
  auto found = history.session_json(call.caller.tenant, owner, session_id(call));
  if (!found) no_session(call);
  return Response(200, *found);
}

// POST /v1/sessions {"id"?, "title"?, "messages": [...]}: keeps a conversation the model did not
// answer (an imported one) as a new session of the caller (session_import.h); 201 with its list
// entry, 409 when the caller already has a session of that id.
Response import_session(const RouteCall& call) {
  HistoryReader& history = history_of(call);
  auto* importer = dynamic_cast<SessionImport*>(&history);
  if (!importer) {
    throw RequestFailure(make_error(404, "invalid_request_error",
                                    "this pipeline's history store cannot import sessions",
                                    "not_found"));
  }
  std::string owner = session_owner(call);
  SessionImportRequest request = parse_session_import(call.body);
  std::string id = request.id.empty() ? new_imported_session_id() : request.id;
  auto created =
      importer->import_session(call.caller.tenant, owner, id, request.turns, request.title);
  if (!created) {
    throw RequestFailure(make_error(409, "invalid_request_error",
                                    "you already have a session '" + text::repair(id) +
                                        "': import it under another id, or leave 'id' out",
                                    "session_exists", "id"));
  }
  return Response(201, json::serialize(session_summary_json(*created)));
}

// PATCH /v1/sessions/{id} {"title": "..."}: renames the session; answers its summary.
Response rename_session(const RouteCall& call) {
  HistoryReader& history = history_of(call);
  if (auto turn = requested_active_turn(call.body)) return show_branch(call, history, *turn);
  std::string title = openai::parse_session_title(call.body);
  auto renamed =
      history.rename_session(call.caller.tenant, session_owner(call), session_id(call), title);
  if (!renamed) no_session(call);
  return Response(200, json::serialize(session_summary_json(*renamed)));
}

// GET /v1/dashboard/graph.svg: the served pipeline as `chatflow graph --format svg` draws it.
Response dashboard_graph(const RouteCall& call) {
  return Response(200, render_svg(call.served->pipeline->spec()), "image/svg+xml; charset=utf-8");
}

// The /metrics series the dashboard reads, by what it shows them as.
json::object dashboard_metric_names() {
  return {
      {"stage_duration", "chatflow:stage_duration_seconds"},
      {"requests_in_flight", "chatflow:requests_in_flight"},
      {"requests_running", "chatflow:num_requests_running"},
      {"requests_waiting", "chatflow:num_requests_waiting"},
      {"time_to_first_token", "chatflow:time_to_first_token_seconds"},
      {"inter_token_latency", "chatflow:inter_token_latency_seconds"},
      {"e2e_request_latency", "chatflow:e2e_request_latency_seconds"},
      {"time_per_output_token", "chatflow:request_time_per_output_token_seconds"},
      {"queue_time", "chatflow:request_queue_time_seconds"},
      {"cache_served_tokens", "chatflow:cache_served_tokens_total"},
      {"preemptions", "chatflow:num_preemptions_total"},
      {"request_success", "chatflow:request_success_total"},
      {"request_failure", "chatflow:request_failure_total"},
      {"http_requests", "chatflow:http_requests_total"},
      {"generation_tokens", "chatflow:generation_tokens_total"},
      {"kv_cache_usage", "chatflow:kv_cache_usage_perc"},
      {"prefix_cache_queries", "chatflow:prefix_cache_queries_total"},
      {"prefix_cache_hits", "chatflow:prefix_cache_hits_total"},
      {"annotations", "chatflow:request_annotations_total"},
      {"tenant_requests", "chatflow:tenant_requests_total"},
      {"arm_requests", "chatflow:arm_requests_total"},
      {"arm_e2e_request_latency", "chatflow:arm_e2e_request_latency_seconds"},
      {"arm_time_to_first_token", "chatflow:arm_time_to_first_token_seconds"},
  };
}

// GET /v1/dashboard/summary: what the dashboard needs beside /metrics: the pipeline's stages
// (type, kind, layer, A/B arm, where each port leads), its arms, models and resources.
Response dashboard_summary(const RouteCall& call) {
  const ServedPipeline& served = *call.served;
  const PipelineSpec& spec = served.pipeline->spec();
  std::vector<size_t> depths = stage_depths(spec);
  std::vector<std::string> arms = stage_arms(spec);
  json::array stages;
  json::array arm_list;
  for (size_t i = 0; i < spec.stages.size(); ++i) {
    const StageSpec& stage = spec.stages[i];
    json::array outputs;
    for (const Connection& connection : spec.connections) {
      if (connection.from_stage != i) continue;
      const PortInfo& port = stage.type->ports[connection.from_port];
      std::string to = connection.to_stage == kSinkStage ? std::string("sink")
                                                         : spec.stages[connection.to_stage].name;
      outputs.push_back(
          {{"port", port.name}, {"to", to}, {"stream", port.kind == PortKind::stream}});
      if (stage.type->name == "ab_split")
        arm_list.push_back({{"name", port.name}, {"stage", stage.name}, {"first_stage", to}});
    }
    json::object entry{{"name", stage.name},
                       {"type", stage.type->name},
                       {"kind", stage.type->kind == StageKind::stream ? "stream" : "request"},
                       {"depth", static_cast<int64_t>(depths[i])},
                       {"outputs", outputs}};
    if (!arms[i].empty()) entry["arm"] = arms[i];
    if (stage.concurrency != kUnlimitedConcurrency)
      entry["concurrency"] = static_cast<int64_t>(stage.concurrency);
    stages.push_back(std::move(entry));
  }
  json::array models;
  for (const auto& model : served.models) {
    models.push_back({{"id", model->model_id()}, {"max_model_len", model->context_length()}});
  }
  json::array resources;
  for (const auto& resource : spec.resources)
    resources.push_back({{"name", resource.name}, {"type", resource.type->name}});
  json::array caches;
  for (const CacheAdmin* cache : served.caches)
    caches.push_back(json::string(cache->cache_name()));
  json::object summary{
      {"object", "dashboard.summary"},
      {"pipeline", spec.name},
      {"created", served.created},
      {"max_in_flight", static_cast<int64_t>(spec.max_in_flight)},
      {"model", served.model_ids.empty() ? json::value(nullptr) : json::value(served.model_ids[0])},
      {"models", models},
      {"stages", stages},
      {"arms", arm_list},
      {"resources", resources},
      {"features",
       {{"auth", served.authenticator != nullptr},
        {"history", served.history != nullptr},
        {"usage", served.usage != nullptr},
        {"caches", caches}}},
      {"metrics", dashboard_metric_names()},
  };
  return Response(200, json::serialize(summary));
}

// GET /v1/dashboard/history?range=15m|1h|6h[&after=MS]: the server's own samples of the series
// the dashboard draws (dashboard_history.h), those later than `after` (Unix ms) when given.
Response dashboard_history(const RouteCall& call) {
  std::string range = query_value(call.query, "range");
  if (range.empty()) range = "15m";
  std::string after = query_value(call.query, "after");
  bool digits = after.size() <= 15 && std::all_of(after.begin(), after.end(),
                                                  [](char c) { return c >= '0' && c <= '9'; });
  if (!digits) {
    throw RequestFailure(
        make_error(400, "invalid_request_error",
                   "'after' must be a time in Unix milliseconds, got '" + text::repair(after) + "'",
                   "invalid_value", "after"));
  }
  std::optional<std::string> body =
      call.dashboard_history
          ? call.dashboard_history->json(range, after.empty() ? 0 : std::stoll(after))
          : std::nullopt;
  if (!body && call.dashboard_history) {
    throw RequestFailure(
        make_error(400, "invalid_request_error",
                   "'range' must be 15m, 1h or 6h, got '" + text::repair(range) + "'",
                   "invalid_value", "range"));
  }
  if (!body) {
    throw RequestFailure(
        make_error(503, "server_error", "this server keeps no dashboard history", "no_history"));
  }
  return Response(200, std::move(*body));
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

// POST /v1/messages/count_tokens: the prompt a Messages request would make, counted as the
// model's gates count it (the chat template, the tools it shows).
Response count_message_tokens(const RouteCall& call) {
  Request request;
  anthropic::parse_count_tokens_request(call.body, request, call.served->model_ids);
  const auto* counter = dynamic_cast<const AnswerTokenBound*>(call.served->model(request.model));
  if (!counter) {
    throw RequestFailure(
        make_error(400, "invalid_request_error",
                   "the model '" + request.model + "' has no tokenizer to count with",
                   "no_tokenizer", "model"));
  }
  return Response(200, anthropic::count_tokens_json(counter->prompt_token_count(request)));
}

// GCC 12 reports every member a designated initializer leaves out, even those with a default.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
constexpr Route kRoutes[] = {
    {.pattern = "/v1/chat/completions",
     .method = "POST",
     .access = Access::pipeline,
     .kind = RouteKind::generation,
     .generation = RequestKind::chat,
     .takes_body = true},
    {.pattern = "/v1/completions",
     .method = "POST",
     .access = Access::pipeline,
     .kind = RouteKind::generation,
     .generation = RequestKind::completion,
     .takes_body = true},
    // Anthropic's Messages API through the same pipeline, translated at the edge.
    {.pattern = "/v1/messages",
     .method = "POST",
     .access = Access::pipeline,
     .kind = RouteKind::generation,
     .generation = RequestKind::chat,
     .takes_body = true,
     .wire = Wire::anthropic},
    {.pattern = "/v1/messages/count_tokens",
     .method = "POST",
     .endpoint = count_message_tokens,
     .takes_body = true,
     .off_io_thread = true,
     .wire = Wire::anthropic},
    // OpenAI's Responses API through the same pipeline, translated at the edge; the responses
    // kept for previous_response_id are the server's (responses_routes.cpp).
    {.pattern = "/v1/responses",
     .method = "POST",
     .access = Access::pipeline,
     .kind = RouteKind::generation,
     .generation = RequestKind::chat,
     .takes_body = true,
     .wire = Wire::responses},
    // A history store keeping responses may be a database: off the I/O thread.
    {.pattern = "/v1/responses/{id}",
     .method = "GET",
     .endpoint = get_response,
     .off_io_thread = true},
    {.pattern = "/v1/responses/{id}",
     .method = "DELETE",
     .endpoint = delete_response,
     .body_optional = true,
     .off_io_thread = true},
    // Vectors and rankings from the pipeline's embedder resources (embedding_routes.cpp).
    {.pattern = "/v1/embeddings",
     .method = "POST",
     .endpoint = embeddings,
     .takes_body = true,
     .off_io_thread = true},
    {.pattern = "/v1/rerank",
     .method = "POST",
     .endpoint = rerank,
     .takes_body = true,
     .off_io_thread = true},
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
    {.pattern = "/tokenize",
     .method = "POST",
     .endpoint = tokenize,
     .takes_body = true,
     .off_io_thread = true},
    {.pattern = "/detokenize",
     .method = "POST",
     .endpoint = detokenize,
     .takes_body = true,
     .off_io_thread = true},
    {.pattern = "/v1/usage", .method = "GET", .endpoint = usage, .off_io_thread = true},
    {.pattern = "/v1/sessions", .method = "GET", .endpoint = sessions, .off_io_thread = true},
    {.pattern = "/v1/sessions",
     .method = "POST",
     .endpoint = import_session,
     .takes_body = true,
     .off_io_thread = true},
    {.pattern = "/v1/sessions",
     .method = "DELETE",
     .endpoint = delete_sessions,
     .body_optional = true,
     .off_io_thread = true},
    // Documents a user uploads for retrieval, owner-scoped like sessions (document_routes.cpp).
    {.pattern = "/v1/documents",
     .method = "POST",
     .endpoint = upload_document,
     .takes_body = true,
     .off_io_thread = true,
     .multipart = true},
    {.pattern = "/v1/documents",
     .method = "GET",
     .endpoint = list_documents,
     .off_io_thread = true},
    {.pattern = "/v1/documents/{id}",
     .method = "GET",
     .endpoint = get_document,
     .off_io_thread = true},
    {.pattern = "/v1/documents/{id}",
     .method = "DELETE",
     .endpoint = delete_document,
     .body_optional = true,
     .off_io_thread = true},
    // A colon, not a slash: "/v1/sessions/export" would be the session named "export".
    {.pattern = "/v1/sessions:export",
     .method = "GET",
     .endpoint = export_sessions,
     .off_io_thread = true},
    {.pattern = "/v1/sessions/{id}", .method = "GET", .endpoint = session, .off_io_thread = true},
    {.pattern = "/v1/sessions/{id}",
     .method = "PATCH",
     .endpoint = rename_session,
     .takes_body = true,
     .off_io_thread = true},
    {.pattern = "/v1/sessions/{id}",
     .method = "DELETE",
     .endpoint = delete_session,
     .body_optional = true,
     .off_io_thread = true},
    {.pattern = "/v1/dashboard/graph.svg",
     .method = "GET",
     .access = Access::admin,
     .endpoint = dashboard_graph,
     .admin_refusal = "only admins may open the dashboard"},
    {.pattern = "/v1/dashboard/summary",
     .method = "GET",
     .access = Access::admin,
     .endpoint = dashboard_summary,
     .admin_refusal = "only admins may open the dashboard"},
    {.pattern = "/v1/dashboard/history",
     .method = "GET",
     .access = Access::admin,
     .endpoint = dashboard_history,
     .admin_refusal = "only admins may open the dashboard"},
    {.pattern = "/v1/cache",
     .method = "DELETE",
     .access = Access::admin,
     .endpoint = forget,
     .takes_body = true,
     .off_io_thread = true,
     .admin_refusal = "only admins may correct caches"},
    // Written or forgotten between two engine steps: off the I/O thread.
    {.pattern = "/admin/prefix_cache/save",
     .method = "POST",
     .access = Access::admin,
     .endpoint = save_prefix_cache,
     .takes_body = true,
     .body_optional = true,
     .off_io_thread = true,
     .admin_refusal = "only admins may save the prefix cache"},
    {.pattern = "/admin/prefix_cache/clear",
     .method = "POST",
     .access = Access::admin,
     .endpoint = clear_prefix_cache,
     .takes_body = true,
     .body_optional = true,
     .off_io_thread = true,
     .admin_refusal = "only admins may clear the prefix cache"},
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

const Route& route_for_method(const Route& route, std::string_view method) {
  for (const Route& candidate : kRoutes) {
    if (candidate.pattern == route.pattern && candidate.method == method) return candidate;
  }
  return route;
}

std::string allowed_methods(const Route& route) {
  std::string methods;
  for (const Route& candidate : kRoutes) {
    if (candidate.pattern != route.pattern) continue;
    if (!methods.empty()) methods += ", ";
    methods += candidate.method;
  }
  return methods;
}

void require_admin(const Route& route, const RouteCall& call) {
  if (route.access != Access::admin || call.public_path) return;
  if (call.served && call.served->authenticator && !call.caller.has_role("admin")) {
    throw RequestFailure(
        make_error(403, "permission_error", std::string(route.admin_refusal), "forbidden"));
  }
}

}  // namespace chatflow::server
