// Options more than one command declares: sampling (`run`, `generate`) and the embedder
// (`index`, `eval-retrieval`).
#include "framework/cli/command.h"

#include <cstdint>

#include <CLI/CLI.hpp>

#include "framework/api/request.h"

namespace chatflow::cli {

void add_sampling_options(CLI::App& command, GenerationParams& generation) {
  // Livelier than the API's defaults (OpenAI's), for a prompt typed at a terminal.
  generation.max_tokens = 128;
  generation.temperature = 0.8f;
  generation.top_k = 40;
  generation.top_p = 0.95f;
  generation.min_p = 0.05f;
  command.add_option("--max-tokens", generation.max_tokens, "tokens to generate at most")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  command.add_option("--temperature", generation.temperature, "0 for greedy")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  command.add_option("--top-k", generation.top_k, "0 disables")
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  command.add_option("--top-p", generation.top_p, "1 disables")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  command.add_option("--min-p", generation.min_p, "0 disables")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  command.add_option("--repeat-penalty", generation.repetition_penalty, "1 disables")
      ->check(CLI::Range(0.0, 10.0))
      ->capture_default_str();
  command
      .add_option("--presence-penalty", generation.presence_penalty,
                  "subtracted from the logit of every token already seen (0 disables)")
      ->check(CLI::Range(-2.0, 2.0))
      ->capture_default_str();
  command
      .add_option("--frequency-penalty", generation.frequency_penalty,
                  "subtracted from a token's logit per time it was seen (0 disables)")
      ->check(CLI::Range(-2.0, 2.0))
      ->capture_default_str();
  command
      .add_option_function<int64_t>(
          "--seed",
          [&generation](const int64_t& seed) {
            if (seed >= 0) {
              generation.seed = static_cast<uint64_t>(seed);
            } else {
              generation.seed.reset();
            }
          },
          "-1: random")
      ->default_str("-1");
  command.add_option("--stop", generation.stop, "stop string (repeatable)");
}

void add_embedder_options(CLI::App& command, EmbedderOptions& embedder) {
  command.add_option("--embedder", embedder.kind, "ngrams or model2vec")
      ->check(CLI::IsMember({"ngrams", "model2vec"}))
      ->capture_default_str();
  command.add_option("--embedder-path", embedder.path, "model2vec: the model's directory");
  command.add_option("--dimensions", embedder.dimensions, "ngrams: vector length")
      ->check(CLI::Range(16, 4096))
      ->capture_default_str();
  command.add_option("--ngram", embedder.ngram, "ngrams: characters per n-gram")
      ->check(CLI::Range(2, 8))
      ->capture_default_str();
}

}  // namespace chatflow::cli
