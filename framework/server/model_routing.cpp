#include "framework/server/model_routing.h"

#include <algorithm>

#include "framework/server/connection.h"

namespace chatflow::server {

namespace json = boost::json;

ModelRouter::Loaded serve_model_pipeline(std::shared_ptr<Pipeline> pipeline,
                                         const ModelEntry& entry, MetricsRegistry& metrics,
                                         std::shared_ptr<PipelineReaper> reaper,
                                         bool front_authenticates) {
  if (!pipeline) throw std::runtime_error("its pipeline was not built");
  std::unique_ptr<ServedPipeline> served = describe_pipeline(std::move(pipeline), metrics);
  // The front only checks credentials: the caller's identity, its roles' access to models and
  // the owner of its sessions are set by an auth stage in the pipeline that runs the request.
  // Without one, the entry's requests would run as nobody's, past every access rule.
  if (front_authenticates && !served->authenticator) {
    throw std::runtime_error(
        "its pipeline has no auth stage, but the serve file's pipeline authenticates: add the "
        "same auth stage to the entry's pipeline, so that its requests run with the caller's "
        "identity, roles and model access rules");
  }
  served->model_entry = true;
  served->model_ids = {entry.name};
  served->model_ids.insert(served->model_ids.end(), entry.aliases.begin(), entry.aliases.end());
  int64_t memory = 0;
  for (const auto& model : served->models) {
    EngineStats stats = model->engine_stats();
    memory += stats.weight_bytes + stats.kv_pool_bytes + stats.workspace_bytes;
  }
  return {PipelineReaper::adopt(std::move(served), std::move(reaper)), memory};
}

namespace {

json::object model_status_json(const ModelStatus& status) {
  json::object object{{"value", to_string(status.state)}};
  if (status.state == ModelState::failed) {
    object["failed"] = true;
    object["reason"] = status.failure;
  }
  return object;
}

json::object entry_json(const ModelStatus& status, int64_t created) {
  json::array aliases;
  for (const auto& alias : status.aliases)
    aliases.push_back(json::string(alias));
  json::object object{{"id", status.name},
                      {"object", "model"},
                      {"created", created},
                      {"owned_by", "chatflow"},
                      {"root", status.name},
                      {"aliases", aliases},
                      {"status", model_status_json(status)}};
  if (status.state == ModelState::loaded) {
    object["loaded_at"] = status.loaded_at;
    object["memory_bytes"] = status.memory_bytes;
    if (const ServedModel* model = status.served->model(status.name))
      object["max_model_len"] = model->context_length();
  }
  return object;
}

}  // namespace

void list_routed_models(const ModelRouter& router, int64_t created, json::array& data) {
  for (auto& model : data) {
    if (auto* object = model.if_object()) (*object)["status"] = json::object{{"value", "loaded"}};
  }
  for (const ModelStatus& status : router.statuses())
    data.push_back(entry_json(status, created));
}

std::optional<json::object> routed_model(const ModelRouter& router, int64_t created,
                                         const std::string& id) {
  const ModelEntry* entry = router.find(id);
  if (!entry) return std::nullopt;
  for (const ModelStatus& status : router.statuses()) {
    if (status.name == entry->name) return entry_json(status, created);
  }
  return std::nullopt;
}

std::string requested_model(const std::string& body) {
  boost::system::error_code error;
  json::value document = json::parse(body, error);
  if (error || !document.is_object()) return "";
  const json::value* model = document.get_object().if_contains("model");
  if (!model || !model->is_string()) return "";
  return std::string(model->get_string());
}

RequestError unknown_model(const std::string& model, const ModelRouter& router,
                           const std::vector<std::string>& pipeline_models) {
  std::vector<std::string> names = pipeline_models;
  for (const auto& name : router.names()) {
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  std::string listed;
  for (const auto& name : names)
    listed += (listed.empty() ? "'" : ", '") + name + "'";
  return make_error(404, "invalid_request_error",
                    "The model '" + model + "' does not exist; this server serves " + listed,
                    "model_not_found", "model");
}

bool routes_by_model(const Route& route) {
  static constexpr std::string_view kRoutes[] = {"/v1/embeddings",
                                                 "/v1/rerank",
                                                 "/tokenize",
                                                 "/detokenize",
                                                 "/v1/messages/count_tokens",
                                                 "/admin/prefix_cache/save",
                                                 "/admin/prefix_cache/clear"};
  return route.off_io_thread &&
         std::find(std::begin(kRoutes), std::end(kRoutes), route.pattern) != std::end(kRoutes);
}

// Hands `model`'s pipeline to `loaded` on the connection's strand once the router has it; the
// connection waits meanwhile, holding no thread. A router error (the load failed, no room) is
// answered here instead, a 503 with Retry-After.
void Connection::with_model_pipeline(
    const std::string& model, const std::string& endpoint,
    std::function<void(std::shared_ptr<const ServedPipeline>)> loaded) {
  auto self = shared_from_this();
  uint64_t exchange = exchange_;
  state_->model_router->acquire(model, [self, exchange, endpoint, loaded = std::move(loaded)](
                                           std::shared_ptr<const ServedPipeline> served,
                                           std::optional<RequestError> error) {
    net::post(self->stream_.get_executor(), [self, exchange, endpoint, loaded,
                                             served = std::move(served), error = std::move(error)] {
      if (self->closed_ || exchange != self->exchange_) return;
      if (error) {
        Response response = error_response(*error, self->wire());
        if (error->status == 503) {
          response.headers.push_back(
              {"Retry-After", std::to_string(self->state_->settings.retry_after_s)});
        }
        return self->respond(response, endpoint, &*error);
      }
      loaded(served);
    });
  });
}

void Connection::route_side_call(const Route& route, const std::string& endpoint) {
  std::string model = requested_model(call_.body);
  if (!state_->model_router->find(model)) return run_on_worker(route, endpoint);
  with_model_pipeline(model, endpoint, [this, &route, endpoint](auto served) {
    // The connection holds the entry's pipeline until the call is answered: it is busy.
    served_ = std::move(served);
    call_.served = served_.get();
    run_on_worker(route, endpoint);
  });
}

// Runs on the connection's strand. A model that is loaded answers at once.
void Connection::route_generation(RequestKind kind, const std::string& endpoint) {
  const ModelRouter& router = *state_->model_router;
  std::string model = requested_model(call_.body);
  if (!router.find(model)) {
    const auto& ids = served_->model_ids;
    // No model, or not an entry's: the serve file's pipeline answers as without `models:`.
    if (model.empty() || std::find(ids.begin(), ids.end(), model) != ids.end()) {
      return start_generation(served_, kind, call_.body, endpoint);
    }
    throw RequestFailure(unknown_model(model, router, ids));
  }
  with_model_pipeline(model, endpoint, [this, kind, endpoint](auto served) {
    try {
      start_generation(served, kind, call_.body, endpoint);
    } catch (const RequestFailure& failure) {
      respond_error(failure.error(), endpoint);
    } catch (const std::exception& failure) {
      respond_error(make_error(500, "server_error", failure.what(), "internal_error"), endpoint);
    }
  });
}

}  // namespace chatflow::server
