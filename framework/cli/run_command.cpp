// chatflow run FILE --prompt TEXT: one request through a pipeline, its stream printed as it comes.
#include <chrono>
#include <future>
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "framework/api/request.h"
#include "framework/api/sink.h"
#include "framework/cli/command.h"
#include "framework/runtime/pipeline.h"

namespace chatflow::cli {
namespace {

struct RunOptions {
  std::string file;
  std::string prompt;
  std::string system;
  bool completion = false;  // send the prompt as a completion, without the chat template
  std::string api_key;      // sent as the Authorization header, for pipelines with auth
  GenerationParams generation;
};

class PrintingSink final : public Sink {
 public:
  // The answer on standard output; a reasoning model's reasoning as it comes on standard error,
  // and an engine's structured tool calls one a line after the text.
  void on_chunk(Request&, const Chunk& chunk) override {
    if (!chunk.reasoning.empty()) std::cerr << chunk.reasoning << std::flush;
    std::cout << chunk.text;
    for (const auto& call : chunk.tool_calls)
      std::cout << "\ntool call " << call.name << " " << call.arguments << "\n";
    std::cout << std::flush;
    printed_any_ = printed_any_ || !chunk.text.empty() || !chunk.tool_calls.empty();
  }
  void on_finish(Request&) override { done_.set_value(); }

  std::future<void> done() { return done_.get_future(); }
  bool printed_any() const { return printed_any_; }

 private:
  std::promise<void> done_;
  bool printed_any_ = false;
};

int run_command(const RunOptions& options) {
  Diagnostics diagnostics;
  auto pipeline = load_pipeline(options.file, builtin_registry(), diagnostics);
  if (!pipeline) {
    std::cerr << diagnostics.to_string();
    return 1;
  }
  auto request = std::make_shared<Request>();
  request->id = "cli-1";
  request->created = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  if (options.completion) {
    request->kind = RequestKind::completion;
    request->prompt = options.prompt;
  } else {
    if (!options.system.empty()) request->messages.push_back({"system", options.system});
    request->messages.push_back({"user", options.prompt});
  }
  request->generation = options.generation;
  if (!options.api_key.empty())
    request->headers.push_back({"authorization", "Bearer " + options.api_key});
  auto sink = std::make_shared<PrintingSink>();
  request->sink = sink;
  std::future<void> done = sink->done();
  if (Admission admission = pipeline->submit(request); admission != Admission::accepted) {
    std::cerr << "chatflow: the pipeline did not admit the request (" << to_string(admission)
              << ")\n";
    return 1;
  }
  done.wait();
  if (sink->printed_any()) std::cout << "\n";
  if (const auto& error = request->error()) {
    std::cerr << "chatflow: request failed: " << error->status << " " << error->type << ": "
              << error->message << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

void add_run_command(CLI::App& app, CommandBody& selected) {
  auto options = std::make_shared<RunOptions>();
  auto* command =
      app.add_subcommand("run", "Push one request through a pipeline and print the stream");
  command->add_option("file", options->file, "pipeline YAML file")->required();
  command->add_option("--prompt", options->prompt, "the user message")->required();
  command->add_option("--system", options->system, "an optional system message");
  command->add_flag("--completion", options->completion,
                    "a raw completion prompt (no chat template)");
  command->add_option("--api-key", options->api_key, "for a pipeline with auth")
      ->envname("CHATFLOW_API_KEY");
  add_sampling_options(*command, options->generation);
  command->callback(
      [&selected, options] { selected = [options] { return run_command(*options); }; });
}

}  // namespace chatflow::cli
