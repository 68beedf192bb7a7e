// chatflow validate FILE...: the full load and build a server would do, without serving.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "framework/cli/command.h"
#include "framework/runtime/pipeline.h"

namespace chatflow::cli {
namespace {

struct ValidateOptions {
  std::vector<std::string> files;
};

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

}  // namespace

void add_validate_command(CLI::App& app, CommandBody& selected) {
  auto options = std::make_shared<ValidateOptions>();
  auto* command =
      app.add_subcommand("validate", "Load, check and build pipeline files without serving");
  command->add_option("files", options->files, "pipeline YAML files")->required();
  command->callback(
      [&selected, options] { selected = [options] { return validate_command(*options); }; });
}

}  // namespace chatflow::cli
