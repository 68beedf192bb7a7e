// Where a request's `model` meets the serve file's `models:` entries: an entry's pipeline made
// servable, the entries as /v1/models lists them, and the 404 of a model nobody serves. The
// connection's half (waiting for a load, then the generation) is Connection::route_generation.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <boost/json.hpp>

#include "framework/server/model_router.h"
#include "framework/server/pipeline_reaper.h"
#include "framework/server/routes.h"

namespace chatflow::server {

// `pipeline`, built for `entry`, as the server serves it: answering to the entry's name and
// aliases, its request metrics labelled with its pipeline's name (the entry's), destroyed by
// `reaper` once unloaded and let go of; with its engines' memory (weights and KV pool). Throws
// when the serve file's pipeline authenticates (`front_authenticates`) and this one has no auth
// stage to give its requests their caller.
ModelRouter::Loaded serve_model_pipeline(std::shared_ptr<Pipeline> pipeline,
                                         const ModelEntry& entry, MetricsRegistry& metrics,
                                         std::shared_ptr<PipelineReaper> reaper,
                                         bool front_authenticates);

// Appends each entry to /v1/models' `data`, with its status, and gives the models already
// there (the serve file's pipeline, always loaded) a status too.
void list_routed_models(const ModelRouter& router, int64_t created, boost::json::array& data);
// /v1/models/{id} for an entry's name or alias; nullopt for any other id.
std::optional<boost::json::object> routed_model(const ModelRouter& router, int64_t created,
                                                const std::string& id);

// The body's `model` when it is a JSON object with a string there, else "" (the protocol's
// parser then says what is wrong with it).
std::string requested_model(const std::string& body);

// A side route whose body names a model: /v1/embeddings, /v1/rerank, /tokenize, /detokenize,
// /v1/messages/count_tokens.
bool routes_by_model(const Route& route);

// 404 model_not_found naming `model` and every name that is served.
RequestError unknown_model(const std::string& model, const ModelRouter& router,
                           const std::vector<std::string>& pipeline_models);

}  // namespace chatflow::server
