// chatflow's command line: each command declares its own subcommand (framework/cli/command.h);
// this file lists them, parses, and runs the one chosen.
#include <algorithm>
#include <exception>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <tbb/global_control.h>

#include "framework/cli/command.h"
#include "framework/engine/compute_threads.h"

namespace {

// The one place an error no command handled itself becomes a message and exit code 1.
int run_reporting_errors(const chatflow::cli::CommandBody& body) {
  try {
    return body();
  } catch (const std::exception& error) {
    std::cerr << "chatflow: " << error.what() << "\n";
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace chatflow::cli;
  CLI::App app{"chatflow: chat pipelines declared in YAML, run on a oneTBB flow graph"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("chatflow ") + CHATFLOW_VERSION);

  CommandBody selected;
  add_validate_command(app, selected);
  add_graph_command(app, selected);
  add_stages_command(app, selected);
  add_run_command(app, selected);
  add_serve_command(app, selected);
  add_keys_command(app, selected);
  add_usage_command(app, selected);
  add_similarity_command(app, selected);
  add_index_command(app, selected);
  add_eval_retrieval_command(app, selected);
  add_bench_retrieval_command(app, selected);
  add_bench_command(app, selected);
  add_bench_graph_command(app, selected);
  add_bench_kernels_command(app, selected);
  add_bench_ledger_command(app, selected);
  add_inspect_command(app, selected);
  add_tokenize_command(app, selected);
  add_detokenize_command(app, selected);
  add_chat_template_command(app, selected);
  add_generate_command(app, selected);
  add_make_model_command(app, selected);
  add_quantize_command(app, selected);
  add_perplexity_command(app, selected);
  add_bench_engine_command(app, selected);
  add_bench_chat_template_command(app, selected);
  add_bench_grammar_command(app, selected);
  add_bench_speculative_command(app, selected);
  // After the subcommands, which would otherwise repeat it under their own help.
  app.footer(
      "`chatflow COMMAND --help` lists a command's options; docs/cli.md describes them all.\n"
      "Exit codes: 0 success, 1 a failed pipeline or request, 2 a command-line usage error\n"
      "(bench: 3 when requests failed).");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    int code = app.exit(error);
    return code == 0 ? 0 : 2;
  }
  // oneTBB sizes its worker pool by the affinity mask but not by a cgroup CPU quota (a
  // container's --cpus), so on a large host the pipeline's and engines' arenas would start a
  // worker per host core. At least 2: the pipeline's arena keeps one slot for outside threads and
  // needs one worker to run the requests enqueued into it.
  tbb::global_control worker_cap(
      tbb::global_control::max_allowed_parallelism,
      static_cast<size_t>(std::max(2, chatflow::engine::available_cpus())));
  return selected ? run_reporting_errors(selected) : 2;
}
