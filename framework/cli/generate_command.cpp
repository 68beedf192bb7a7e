// chatflow generate --model FILE --prompt TEXT: raw completion straight from the engine (no
// chat template, no pipeline), streamed as it is produced.
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "framework/api/request.h"
#include "framework/bridge/engine_bridge.h"
#include "framework/cli/command.h"
#include "framework/engine/generator.h"

namespace chatflow::cli {
namespace {

struct GenerateOptions {
  std::string model;
  std::string prompt;
  int threads = 1;
  bool echo = false;
  bool verbose = false;
  GenerationParams generation;  // as a request through a pipeline would carry them
};

int generate_command(const GenerateOptions& options) {
  auto model = engine::Model::load(options.model);
  engine::Generator generator(model, options.threads);
  engine::GenerationRequest request;
  request.prompt = model->tokenizer().encode(options.prompt, /*add_special=*/true);
  request.sampling = to_sampling_params(options.generation);
  request.max_tokens = options.generation.max_tokens;
  request.stop = options.generation.stop;
  if (options.echo) std::cout << options.prompt;
  auto result = generator.generate(request, [](const engine::GeneratedToken& token) {
    std::cout << token.text << std::flush;
    return true;
  });
  std::cout << "\n";
  if (options.verbose) {
    double decode_rate = result.decode_seconds > 0
                             ? static_cast<double>(result.tokens.size()) / result.decode_seconds
                             : 0;
    std::cerr << "prompt " << request.prompt.size() << " tokens in " << result.prefill_seconds * 1e3
              << " ms; generated " << result.tokens.size() << " tokens at " << decode_rate
              << " tokens/s\n";
  }
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app, CommandBody& selected) {
  auto options = std::make_shared<GenerateOptions>();
  auto* command =
      app.add_subcommand("generate", "Complete a prompt with a model (no template, no pipeline)");
  command->add_option("--model", options->model, "GGUF file")->required();
  command->add_option("--prompt", options->prompt, "text to continue")->required();
  command->add_option("--threads", options->threads, "compute threads")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  command->add_flag("--echo", options->echo, "print the prompt before the completion");
  command->add_flag("--verbose", options->verbose, "print timings to standard error");
  add_sampling_options(*command, options->generation);
  command->callback(
      [&selected, options] { selected = [options] { return generate_command(*options); }; });
}

}  // namespace chatflow::cli
