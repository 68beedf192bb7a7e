#include "framework/server/prefix_cache_routes.h"

#include <algorithm>
#include <memory>

#include <boost/json.hpp>

#include "framework/api/prefix_cache_admin.h"
#include "framework/api/served_model.h"
#include "framework/chat/request_body.h"
#include "framework/server/model_router.h"
#include "framework/server/model_routing.h"

namespace chatflow::server {
namespace json = boost::json;
namespace {

struct NamedCache {
  std::string model;  // the model id clients send
  PrefixCacheAdmin* cache = nullptr;
  std::shared_ptr<const ServedPipeline> holder;  // a loaded models: entry's, kept for the call
};

// The models of `served` with a prefix cache, into `found` (with `holder`); every served model's
// id into `models`, with whether it has one.
void collect_caches(const ServedPipeline& served, std::shared_ptr<const ServedPipeline> holder,
                    std::vector<NamedCache>& found,
                    std::vector<std::pair<std::string, bool>>& models) {
  for (const auto& resource : served.pipeline->spec().resources) {
    auto object = served.pipeline->resource(resource.name);
    const auto* served_model = dynamic_cast<const ServedModel*>(object.get());
    if (!served_model) continue;
    auto* cache = dynamic_cast<PrefixCacheAdmin*>(object.get());
    const bool has_cache = cache && cache->has_prefix_cache();
    models.push_back({served_model->model_id(), has_cache});
    if (has_cache) found.push_back({served_model->model_id(), cache, holder});
  }
}

// The models with a prefix cache the body's optional `model` asks for: the one it names (a
// models: entry's name reaches here with the entry's pipeline), or, without one, every model of
// the serve file's pipeline and of the entries loaded now.
std::vector<NamedCache> caches_asked_for(const RouteCall& call) {
  std::string model;
  if (!call.body.empty()) {
    json::value body = chat::request_body::parse_object(call.body);
    chat::request_body::Fields fields(body.as_object());
    model = fields.string("model", "");
    fields.refuse_unread({});
  }
  std::vector<NamedCache> all;
  std::vector<std::pair<std::string, bool>> models;
  collect_caches(*call.served, nullptr, all, models);
  if (model.empty()) {
    if (call.model_router) {
      for (const ModelStatus& status : call.model_router->statuses()) {
        if (status.served && status.served.get() != call.served)
          collect_caches(*status.served, status.served, all, models);
      }
    }
    if (all.empty()) {
      throw RequestFailure(make_error(404, "invalid_request_error",
                                      "no model here has a prefix cache (a gguf_model with "
                                      "kv_cache.prefix_cache on)",
                                      "model_not_found", "model"));
    }
    return all;
  }
  const auto& entry_names = call.served->model_ids;
  const bool entry = call.served->model_entry &&
                     std::find(entry_names.begin(), entry_names.end(), model) != entry_names.end();
  std::vector<NamedCache> found;
  for (NamedCache& named : all) {
    if (entry || named.model == model) found.push_back(std::move(named));
  }
  if (!found.empty()) return found;
  std::string names;
  for (const auto& [id, has_cache] : models) {
    if (id == model) {
      throw RequestFailure(
          make_error(400, "invalid_request_error",
                     "the model '" + model +
                         "' has no prefix cache "
                         "(kv_cache.prefix_cache is off, or it only counts tokens)",
                     "no_prefix_cache", "model"));
    }
    if (has_cache) names += (names.empty() ? "'" : ", '") + id + "'";
  }
  throw RequestFailure(make_error(404, "invalid_request_error",
                                  "The model '" + model +
                                      "' does not exist; the models with a prefix cache here are " +
                                      (names.empty() ? "none" : names),
                                  "model_not_found", "model"));
}

}  // namespace

// POST /admin/prefix_cache/save {model?}: the model named must keep its cache in a file; without
// a name, every model that keeps one saves it.
Response save_prefix_cache(const RouteCall& call) {
  std::vector<NamedCache> caches = caches_asked_for(call);
  const bool named = !requested_model(call.body).empty();
  std::vector<NamedCache> kept;
  std::string without_file;
  for (NamedCache& cache : caches) {
    if (cache.cache->prefix_cache_file().empty()) {
      if (without_file.empty()) without_file = cache.model;
    } else {
      kept.push_back(std::move(cache));
    }
  }
  if (named && !without_file.empty()) {
    throw RequestFailure(make_error(400, "invalid_request_error",
                                    "the model '" + without_file +
                                        "' keeps no prefix cache file: set "
                                        "kv_cache.persist.path on its gguf_model",
                                    "no_persist_path", "model"));
  }
  if (kept.empty()) {
    throw RequestFailure(make_error(400, "invalid_request_error",
                                    "no model here keeps its prefix cache in a file: set "
                                    "kv_cache.persist.path on a gguf_model",
                                    "no_persist_path", "model"));
  }
  caches = std::move(kept);
  json::array saved;
  for (const NamedCache& named : caches) {
    PrefixCacheAdmin::Saved result;
    try {
      result = named.cache->save_prefix_cache();
    } catch (const std::runtime_error& error) {
      throw RequestFailure(
          make_error(500, "server_error",
                     "the prefix cache of '" + named.model + "' was not saved: " + error.what(),
                     "prefix_cache_not_saved"));
    }
    saved.push_back(json::object{{"model", named.model},
                                 {"blocks", result.blocks},
                                 {"bytes", result.bytes},
                                 {"path", result.path}});
  }
  return Response(200, json::serialize(json::object{{"saved", std::move(saved)}}));
}

// POST /admin/prefix_cache/clear {model?}
Response clear_prefix_cache(const RouteCall& call) {
  json::array cleared;
  for (const NamedCache& named : caches_asked_for(call)) {
    PrefixCacheAdmin::Cleared result;
    try {
      result = named.cache->clear_prefix_cache();
    } catch (const std::runtime_error& error) {
      throw RequestFailure(
          make_error(500, "server_error",
                     "the prefix cache of '" + named.model + "' was not cleared: " + error.what(),
                     "prefix_cache_not_cleared"));
    }
    cleared.push_back(json::object{
        {"model", named.model}, {"blocks", result.blocks}, {"file_removed", result.file_removed}});
  }
  return Response(200, json::serialize(json::object{{"cleared", std::move(cleared)}}));
}

}  // namespace chatflow::server
