// A pipeline is a checked spec built into one long-lived oneTBB flow graph: one node per stage,
// one node output per port, and a sink node that hands each request's chunks to its sink in
// order. It is immutable once built; a changed YAML file becomes a second pipeline beside it.
#pragma once

#include <memory>
#include <string>

#include "framework/api/request.h"
#include "framework/api/resource.h"
#include "framework/api/stage.h"
#include "framework/loading/pipeline_spec.h"

namespace chatflow {

namespace detail {
class PipelineCore;
}

enum class Admission {
  accepted,  // the sink will hear about this request
  full,      // max_in_flight requests are already in the pipeline: answer 503 and retry later
  closed,    // the pipeline is draining or shut down
};

std::string_view to_string(Admission admission);

class Pipeline {
 public:
  // Creates the resources (in dependency order) and stages, then the graph. Errors from
  // factories (a missing model file...) are reported at the resource's or stage's location;
  // returns nullptr when anything failed, never a partly built pipeline. With `previous` (a
  // reload), a resource whose configuration and dependencies are unchanged is shared with it
  // instead of created again; their names go to `reused`.
  static std::unique_ptr<Pipeline> build(PipelineSpec spec, Diagnostics& diagnostics,
                                         const Pipeline* previous = nullptr,
                                         std::vector<std::string>* reused = nullptr);

  // Drains: waits until every admitted request has finished and every ChunkWriter or
  // Continuation handed out has been destroyed.
  ~Pipeline();

  // Never blocks. On `accepted` the request runs and its sink's on_finish will be called once;
  // otherwise the sink is not called and the request can be submitted elsewhere.
  // A request is submitted at most once.
  Admission submit(std::shared_ptr<Request> request);

  const PipelineSpec& spec() const;
  // The resource declared under `name`, or nullptr (for metrics and tests).
  std::shared_ptr<Resource> resource(const std::string& name) const;
  // The first resource, then stage, that implements interface T (e.g. an Authenticator the
  // server uses for routes outside the pipeline), or nullptr. Valid while the pipeline lives.
  template <class T>
  T* find() const {
    for (const auto& [name, resource] : resources()) {
      if (auto* found = dynamic_cast<T*>(resource.get())) return found;
    }
    for (size_t i = 0; i < spec().stages.size(); ++i) {
      if (auto* found = dynamic_cast<T*>(stage(i))) return found;
    }
    return nullptr;
  }
  // Every resource and stage that implements T.
  template <class T>
  std::vector<T*> find_all() const {
    std::vector<T*> found;
    for (const auto& [name, resource] : resources()) {
      if (auto* object = dynamic_cast<T*>(resource.get())) found.push_back(object);
    }
    for (size_t i = 0; i < spec().stages.size(); ++i) {
      if (auto* object = dynamic_cast<T*>(stage(i))) found.push_back(object);
    }
    return found;
  }
  const ResourceMap& resources() const;
  Stage* stage(size_t index) const;

  // Requests admitted and not yet finished.
  size_t active_requests() const;
  // Stops admitting (submit returns `closed`) and waits for the requests in flight to finish.
  void drain();

 private:
  explicit Pipeline(std::unique_ptr<detail::PipelineCore> core);
  std::unique_ptr<detail::PipelineCore> core_;
};

// load_pipeline_spec + Pipeline::build.
std::unique_ptr<Pipeline> load_pipeline(const std::string& path, const Registry& registry,
                                        Diagnostics& diagnostics,
                                        const Pipeline* previous = nullptr,
                                        std::vector<std::string>* reused = nullptr);

}  // namespace chatflow
