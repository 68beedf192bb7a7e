#include "framework/server/prefix_cache_routes.h"

#include <boost/json.hpp>

#include "framework/api/prefix_cache_admin.h"
#include "framework/api/served_model.h"
#include "framework/chat/request_body.h"

namespace chatflow::server {
namespace json = boost::json;
namespace {

struct NamedCache {
  std::string model;  // the model id clients send
  PrefixCacheAdmin* cache = nullptr;
};

// The models of the pipeline with a prefix cache: the one the body's optional `model` names (404
// when it names none of them), else all of them.
std::vector<NamedCache> caches_asked_for(const RouteCall& call) {
  std::string model;
  if (!call.body.empty()) {
    json::value body = chat::request_body::parse_object(call.body);
    chat::request_body::Fields fields(body.as_object());
    model = fields.string("model", "");
    fields.refuse_unread({});
  }
  std::vector<NamedCache> found;
  std::string names;
  const ServedPipeline& served = *call.served;
  for (const auto& resource : served.pipeline->spec().resources) {
    auto object = served.pipeline->resource(resource.name);
    auto* cache = dynamic_cast<PrefixCacheAdmin*>(object.get());
    const auto* served_model = dynamic_cast<const ServedModel*>(object.get());
    if (!cache || !served_model || !cache->has_prefix_cache()) continue;
    const std::string& id = served_model->model_id();
    names += (names.empty() ? "'" : ", '") + id + "'";
    const auto& entry_names = served.model_ids;
    const bool entry = served.model_entry && std::find(entry_names.begin(), entry_names.end(),
                                                       model) != entry_names.end();
    if (model.empty() || model == id || model == resource.name || entry)
      found.push_back({id, cache});
  }
  if (found.empty()) {
    throw RequestFailure(make_error(404, "invalid_request_error",
                                    names.empty()
                                        ? "no model here has a prefix cache (a gguf_model with "
                                          "kv_cache.prefix_cache on)"
                                        : "The model '" + model +
                                              "' does not exist; the models with a prefix cache "
                                              "here are " +
                                              names,
                                    "model_not_found", "model"));
  }
  return found;
}

}  // namespace

// POST /admin/prefix_cache/save {model?}: every model asked for must keep its cache in a file.
Response save_prefix_cache(const RouteCall& call) {
  std::vector<NamedCache> caches = caches_asked_for(call);
  for (const NamedCache& named : caches) {
    if (named.cache->prefix_cache_file().empty()) {
      throw RequestFailure(make_error(400, "invalid_request_error",
                                      "the model '" + named.model +
                                          "' keeps no prefix cache file: set "
                                          "kv_cache.persist.path on its gguf_model",
                                      "no_persist_path", "model"));
    }
  }
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
