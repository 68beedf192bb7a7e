// chatflow validate FILE...: the full load and build a server would do, without serving.
#include <iostream>

#include "framework/cli/commands.h"
#include "framework/runtime/pipeline.h"

namespace chatflow::cli {

int validate_command(const ValidateOptions& options) {
  bool all_valid = true;
  for (const auto& file : options.files) {
    Diagnostics diagnostics;
    auto pipeline = load_pipeline(file, builtin_registry(), diagnostics);
    if (!pipeline) {
      std::cerr << diagnostics.to_string();
      all_valid = false;
      continue;
    }
    const PipelineSpec& spec = pipeline->spec();
    std::cout << file << ": ok: pipeline '" << spec.name << "', " << spec.stages.size()
              << " stages, " << spec.resources.size() << " resources\n";
  }
  return all_valid ? 0 : 1;
}

}  // namespace chatflow::cli
