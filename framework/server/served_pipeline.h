// What serve() installed: the pipeline and what the server found in it (models, the capabilities
// of its stages and resources), read by every request through one shared_ptr copy. A reload
// installs a new one; requests holding the old one finish with it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/api/capabilities.h"
#include "framework/api/served_model.h"
#include "framework/runtime/pipeline.h"
#include "framework/server/server_metrics.h"

namespace chatflow::server {

struct ServedPipeline {
  std::shared_ptr<Pipeline> pipeline;
  std::vector<std::shared_ptr<const ServedModel>> models;
  std::vector<std::string> model_ids;
  std::unique_ptr<RequestMetrics> metrics;
  int64_t created = 0;
  // Offered by a stage or resource of the pipeline (the auth stage, the quota stage), or null.
  const Authenticator* authenticator = nullptr;
  const UsageReporter* usage = nullptr;
  std::vector<CacheAdmin*> caches;
  HistoryReader* history = nullptr;
  std::vector<const StorageHealth*> storage;
  // A serve file's `models:` entry's pipeline: model_ids are the entry's name and aliases.
  bool model_entry = false;

  // The model named `id` (any model when `id` is empty), or nullptr. A `models:` entry's
  // pipeline answers to the entry's names: its first model that generates.
  const ServedModel* model(const std::string& id) const {
    for (const auto& model : models) {
      if (id.empty() || model->model_id() == id) return model.get();
    }
    if (std::find(model_ids.begin(), model_ids.end(), id) == model_ids.end()) return nullptr;
    for (const auto& model : models) {
      if (model->generates()) return model.get();
    }
    return nullptr;
  }
};

// What the server serves of `pipeline`: its models and the capabilities of its parts, its
// request metrics in `metrics`.
std::unique_ptr<ServedPipeline> describe_pipeline(std::shared_ptr<Pipeline> pipeline,
                                                  MetricsRegistry& metrics);

}  // namespace chatflow::server
