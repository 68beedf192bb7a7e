// chatflow graph FILE --format dot|mermaid: draws a checked pipeline.
#include <iostream>

#include "framework/cli/commands.h"
#include "framework/loading/graph_render.h"

namespace chatflow::cli {

int graph_command(const GraphOptions& options) {
  Diagnostics diagnostics;
  auto spec = load_pipeline_spec(options.file, builtin_registry(), diagnostics);
  if (!spec) {
    std::cerr << diagnostics.to_string();
    return 1;
  }
  std::cout << (options.format == "mermaid" ? render_mermaid(*spec) : render_dot(*spec));
  return 0;
}

}  // namespace chatflow::cli
