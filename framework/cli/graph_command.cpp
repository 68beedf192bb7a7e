// chatflow graph FILE --format dot|mermaid|svg: draws a checked pipeline.
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "framework/cli/command.h"
#include "framework/loading/graph_render.h"

namespace chatflow::cli {
namespace {

struct GraphOptions {
  std::string file;
  std::string format = "dot";
};

int graph_command(const GraphOptions& options) {
  Diagnostics diagnostics;
  auto spec = load_pipeline_spec(options.file, builtin_registry(), diagnostics);
  if (!spec) {
    std::cerr << diagnostics.to_string();
    return 1;
  }
  if (options.format == "svg") {
    std::cout << render_svg(*spec);
  } else {
    std::cout << (options.format == "mermaid" ? render_mermaid(*spec) : render_dot(*spec));
  }
  return 0;
}

}  // namespace

void add_graph_command(CLI::App& app, CommandBody& selected) {
  auto options = std::make_shared<GraphOptions>();
  auto* command =
      app.add_subcommand("graph", "Draw a checked pipeline as Graphviz DOT, Mermaid or SVG");
  command->add_option("file", options->file, "pipeline YAML file")->required();
  command->add_option("--format", options->format, "dot, mermaid or svg (laid out by chatflow)")
      ->check(CLI::IsMember({"dot", "mermaid", "svg"}))
      ->capture_default_str();
  command->callback(
      [&selected, options] { selected = [options] { return graph_command(*options); }; });
}

}  // namespace chatflow::cli
