// A resource is a long-lived object shared by stages (a model, a store, an index), declared under
// `resources:` in the pipeline YAML and referenced from stage configs by name.
#pragma once

#include <map>
#include <memory>
#include <string>

namespace chatflow {

class Resource {
 public:
  virtual ~Resource() = default;
};

using ResourceMap = std::map<std::string, std::shared_ptr<Resource>>;

}  // namespace chatflow
