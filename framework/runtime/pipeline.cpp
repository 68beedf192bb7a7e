#include "framework/runtime/pipeline.h"

#include <set>

#include "framework/api/config_key_error.h"
#include "framework/runtime/pipeline_core.h"

namespace chatflow {

std::string_view to_string(Admission admission) {
  switch (admission) {
    case Admission::accepted:
      return "accepted";
    case Admission::full:
      return "full";
    case Admission::closed:
      return "closed";
  }
  return "closed";
}

Pipeline::Pipeline(std::unique_ptr<detail::PipelineCore> core) : core_(std::move(core)) {}

Pipeline::~Pipeline() = default;

std::unique_ptr<Pipeline> Pipeline::build(PipelineSpec spec, Diagnostics& diagnostics,
                                          const Pipeline* previous,
                                          std::vector<std::string>* reused) {
  size_t errors_before = diagnostics.size();
  ResourceMap resources;
  std::set<std::string> kept;
  for (const auto& resource : spec.resources) {
    std::string owner = "resource '" + resource.name + "' (" + resource.type->name + ")";
    // A reload keeps a resource whose configuration, and every resource it uses, is unchanged:
    // the loaded model, an index, a store are not loaded again.
    if (previous) {
      const ResourceSpec* before = nullptr;
      for (const auto& candidate : previous->spec().resources) {
        if (candidate.name == resource.name) before = &candidate;
      }
      bool same = before && before->fingerprint == resource.fingerprint &&
                  previous->resource(resource.name);
      for (const auto& reference : resource.references)
        same = same && kept.count(reference.resource_name) > 0;
      if (same) {
        resources.emplace(resource.name, previous->resource(resource.name));
        kept.insert(resource.name);
        if (reused) reused->push_back(resource.name);
        continue;
      }
    }
    try {
      ResourceContext context(resource.name, resources);
      auto created = resource.type->create(resource.config.get(), context);
      if (!created) throw ConfigError("its factory returned nothing");
      resources.emplace(resource.name, std::move(created));
    } catch (const ConfigKeyError& error) {
      auto key = resource.key_locations.find(error.key());
      diagnostics.error(key != resource.key_locations.end() ? key->second : resource.where,
                        owner + ": key '" + error.key() + "': " + error.what());
    } catch (const std::exception& error) {
      diagnostics.error(resource.where, owner + ": " + error.what());
    }
  }
  std::vector<std::unique_ptr<Stage>> stages;
  if (diagnostics.size() == errors_before) {
    for (const auto& stage : spec.stages) {
      std::string owner = "stage '" + stage.name + "' (" + stage.type->name + ")";
      try {
        StageContext context(stage.name, resources);
        auto created = stage.type->create(stage.config.get(), context);
        if (!created) throw ConfigError("its factory returned nothing");
        bool stream_type = stage.type->kind == StageKind::stream;
        bool stream_object = dynamic_cast<StreamStage*>(created.get()) != nullptr;
        bool request_object = dynamic_cast<RequestStage*>(created.get()) != nullptr;
        if ((stream_type && !stream_object) || (!stream_type && !request_object)) {
          throw ConfigError(std::string("its factory made an object that is not a ") +
                            (stream_type ? "StreamStage" : "RequestStage"));
        }
        stages.push_back(std::move(created));
      } catch (const std::exception& error) {
        diagnostics.error(stage.where, owner + ": " + error.what());
      }
    }
  }
  if (diagnostics.size() != errors_before) return nullptr;
  auto core = std::make_unique<detail::PipelineCore>(std::move(spec), std::move(resources),
                                                     std::move(stages));
  return std::unique_ptr<Pipeline>(new Pipeline(std::move(core)));
}

Admission Pipeline::submit(std::shared_ptr<Request> request) {
  return core_->submit(std::move(request));
}

const PipelineSpec& Pipeline::spec() const {
  return core_->spec();
}

std::shared_ptr<Resource> Pipeline::resource(const std::string& name) const {
  return core_->resource(name);
}

const ResourceMap& Pipeline::resources() const {
  return core_->resources();
}

Stage* Pipeline::stage(size_t index) const {
  return core_->stage(index);
}

size_t Pipeline::active_requests() const {
  return core_->active_requests();
}

void Pipeline::drain() {
  core_->drain();
}

std::unique_ptr<Pipeline> load_pipeline(const std::string& path, const Registry& registry,
                                        Diagnostics& diagnostics, const Pipeline* previous,
                                        std::vector<std::string>* reused) {
  auto spec = load_pipeline_spec(path, registry, diagnostics);
  if (!spec) return nullptr;
  return Pipeline::build(std::move(*spec), diagnostics, previous, reused);
}

}  // namespace chatflow
