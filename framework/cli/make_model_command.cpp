// chatflow make-model: writes a random-weight GGUF model of any shape and type.
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "framework/cli/command.h"
#include "framework/engine/gguf_file.h"
#include "framework/engine/model_writer.h"
#include "framework/engine/quantization_recipe.h"

namespace chatflow::cli {
namespace {

struct MakeModelOptions {
  std::string architecture = "llama";
  int64_t dim = 64;
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t kv_heads = 0;  // 0: same as heads
  int64_t ffn = 128;
  int64_t context = 512;
  std::string type = "f32";
  uint64_t seed = 1;
  float weight_scale = 0.08f;
  bool tie_embeddings = false;
  std::string vocabulary_from;
  std::string rope_scaling = "none";
  int64_t sliding_window = 0;
  int64_t experts = 0;
  int64_t experts_used = 2;
  std::string pooling;
  std::string output;
};

int make_model_command(const MakeModelOptions& options) {
  engine::ModelShape shape;
  shape.architecture = options.architecture;
  shape.dim = options.dim;
  shape.layers = options.layers;
  shape.heads = options.heads;
  shape.kv_heads = options.kv_heads > 0 ? options.kv_heads : options.heads;
  shape.ffn = options.ffn;
  shape.context = options.context;
  shape.seed = options.seed;
  shape.weight_scale = options.weight_scale;
  shape.tie_embeddings = options.tie_embeddings;
  shape.vocabulary_from = options.vocabulary_from;
  shape.rope_scaling = options.rope_scaling;
  shape.sliding_window = options.sliding_window;
  shape.experts = options.experts;
  shape.experts_used = options.experts > 0 ? options.experts_used : 0;
  shape.pooling = options.pooling;
  if (!engine::quantization_recipe(options.type)) {
    std::cerr << "chatflow: make-model: unknown type '" << options.type
              << "' (expected one of: " << engine::quantization_recipe_names() << ")\n";
    return 2;
  }
  shape.recipe = options.type;
  engine::write_random_model(shape, options.output);
  auto written = engine::GgufFile::open(options.output);
  const auto* tokens = written->find("tokenizer.ggml.tokens");
  int64_t vocabulary = tokens ? static_cast<int64_t>(tokens->strings.size()) : 0;
  std::cout << options.output << ": " << shape.architecture << ", "
            << engine::parameter_count(shape, vocabulary) << " parameters (" << options.type
            << "), vocabulary " << vocabulary << ", " << std::filesystem::file_size(options.output)
            << " bytes\n";
  return 0;
}

}  // namespace

void add_make_model_command(CLI::App& app, CommandBody& selected) {
  auto options = std::make_shared<MakeModelOptions>();
  auto* command =
      app.add_subcommand("make-model", "Write a random-weight GGUF model of any shape and type");
  command->add_option("--arch", options->architecture, engine::writable_architectures())
      ->check(CLI::IsMember({"llama", "qwen2", "qwen2moe", "qwen3", "qwen3moe", "gemma2", "gemma3",
                             "phi3", "bert", "nomic-bert"}))
      ->capture_default_str();
  command
      ->add_option("--rope-scaling", options->rope_scaling,
                   "none, linear (factor 2), yarn (factor 4), llama3 (rope_freqs factors, llama) "
                   "or longrope (phi3)")
      ->check(CLI::IsMember({"none", "linear", "yarn", "llama3", "longrope"}))
      ->capture_default_str();
  command
      ->add_option("--sliding-window", options->sliding_window,
                   "sliding-window attention's window (default: a quarter of the context for "
                   "gemma2, gemma3 and phi3; none for the others)")
      ->check(CLI::Range(0, 1 << 22));
  command
      ->add_option("--experts", options->experts,
                   "a mixture of experts: llama (Mixtral's layout) or qwen2moe (which needs it)")
      ->check(CLI::Range(0, 256));
  command->add_option("--experts-used", options->experts_used, "experts per token")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  command
      ->add_option("--pooling", options->pooling,
                   "<arch>.pooling_type for embeddings: none, mean, cls or last (default: mean "
                   "for bert and nomic-bert, not written for the others)")
      ->check(CLI::IsMember({"none", "mean", "cls", "last"}));
  command->add_option("--dim", options->dim, "embedding length")
      ->check(CLI::Range(2, 65536))
      ->capture_default_str();
  command->add_option("--layers", options->layers, "transformer blocks")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  command->add_option("--heads", options->heads, "attention heads")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  command->add_option("--kv-heads", options->kv_heads, "key/value heads (default: --heads)")
      ->check(CLI::Range(0, 1024));
  command->add_option("--ffn", options->ffn, "feed-forward length")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  command->add_option("--context", options->context, "context length the file declares")
      ->check(CLI::Range(16, 1 << 22))
      ->capture_default_str();
  command->add_option("--type", options->type, engine::quantization_recipe_names())
      ->capture_default_str();
  command->add_option("--seed", options->seed, "seed of the random weights")->capture_default_str();
  command
      ->add_option("--weight-scale", options->weight_scale,
                   "standard deviation of the random weights (smaller: a calmer model whose "
                   "perplexity moves less with rounding)")
      ->check(CLI::Range(1e-4, 10.0))
      ->capture_default_str();
  command->add_flag("--tie-embeddings", options->tie_embeddings, "no separate output matrix");
  command->add_option("--vocab-from", options->vocabulary_from,
                      "copy the tokenizer from this GGUF file");
  command->add_option("--output,-o", options->output, "file to write")->required();
  command->callback(
      [&selected, options] { selected = [options] { return make_model_command(*options); }; });
}

}  // namespace chatflow::cli
