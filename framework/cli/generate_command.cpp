// chatflow generate --model FILE --prompt TEXT: raw completion straight from the engine (no
// chat template, no pipeline), streamed as it is produced.
#include <iostream>

#include "framework/cli/commands.h"
#include "framework/engine/generator.h"

namespace chatflow::cli {

engine::SamplingParams sampling_from(const SamplingOptions& options) {
  engine::SamplingParams params;
  params.temperature = options.temperature;
  params.top_k = options.top_k;
  params.top_p = options.top_p;
  params.min_p = options.min_p;
  params.repetition_penalty = options.repetition_penalty;
  params.presence_penalty = options.presence_penalty;
  params.frequency_penalty = options.frequency_penalty;
  if (options.seed >= 0) params.seed = static_cast<uint64_t>(options.seed);
  return params;
}

int generate_command(const GenerateOptions& options) {
  try {
    auto model = engine::Model::load(options.model);
    engine::Generator generator(model, options.threads);
    engine::GenerationRequest request;
    request.prompt = model->tokenizer().encode(options.prompt, /*add_special=*/true);
    request.sampling = sampling_from(options.sampling);
    request.max_tokens = options.sampling.max_tokens;
    request.stop = options.sampling.stop;
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
      std::cerr << "prompt " << request.prompt.size() << " tokens in "
                << result.prefill_seconds * 1e3 << " ms; generated " << result.tokens.size()
                << " tokens at " << decode_rate << " tokens/s\n";
    }
    return 0;
  } catch (const std::exception& error) {
    std::cerr << "chatflow: " << error.what() << "\n";
    return 1;
  }
}

}  // namespace chatflow::cli
