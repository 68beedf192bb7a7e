// chatflow's command line: parses arguments with CLI11 and hands off to one command each.
#include <CLI/CLI.hpp>

#include "commands.h"

int main(int argc, char** argv) {
  using namespace chatflow::cli;
  CLI::App app{"chatflow: chat pipelines declared in YAML, run on a oneTBB flow graph"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("chatflow ") + CHATFLOW_VERSION);

  ValidateOptions validate;
  auto* validate_app =
      app.add_subcommand("validate", "Load, check and build pipeline files without serving");
  validate_app->add_option("files", validate.files, "pipeline YAML files")->required();

  GraphOptions graph;
  auto* graph_app =
      app.add_subcommand("graph", "Draw a checked pipeline as Graphviz DOT or Mermaid");
  graph_app->add_option("file", graph.file, "pipeline YAML file")->required();
  graph_app->add_option("--format", graph.format, "dot or mermaid")
      ->check(CLI::IsMember({"dot", "mermaid"}))
      ->capture_default_str();

  StagesOptions stages;
  auto* stages_app = app.add_subcommand("stages", "List stage and resource types, or describe one");
  stages_app->add_option("type", stages.type, "a stage or resource type to describe");

  RunOptions run;
  auto* run_app =
      app.add_subcommand("run", "Push one request through a pipeline and print the stream");
  run_app->add_option("file", run.file, "pipeline YAML file")->required();
  run_app->add_option("--prompt", run.prompt, "the user message")->required();
  run_app->add_option("--system", run.system, "an optional system message");

  BenchGraphOptions bench_graph;
  auto* bench_graph_app = app.add_subcommand(
      "bench-graph", "Measure the runtime's own overhead through a chain of no-op stages");
  bench_graph_app->add_option("--stages", bench_graph.stages, "stages in the chain")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  bench_graph_app->add_option("--requests", bench_graph.requests, "requests per measurement")
      ->check(CLI::Range(1, 100'000'000))
      ->capture_default_str();
  bench_graph_app->add_option("--in-flight", bench_graph.in_flight, "requests kept in flight")
      ->delimiter(',')
      ->check(CLI::Range(1, 100'000))
      ->capture_default_str();
  bench_graph_app->add_flag("--json", bench_graph.json, "print JSON instead of a table");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    int code = app.exit(error);
    return code == 0 ? 0 : 2;
  }
  if (validate_app->parsed()) return validate_command(validate);
  if (graph_app->parsed()) return graph_command(graph);
  if (stages_app->parsed()) return stages_command(stages);
  if (run_app->parsed()) return run_command(run);
  if (bench_graph_app->parsed()) return bench_graph_command(bench_graph);
  return 2;
}
