// chatflow make-model: writes a random-weight GGUF model of any shape and type.
#include <filesystem>
#include <iostream>

#include "framework/cli/commands.h"
#include "framework/engine/gguf_file.h"
#include "framework/engine/model_writer.h"

namespace chatflow::cli {

int make_model_command(const MakeModelOptions& options) {
  try {
    engine::ModelShape shape;
    shape.architecture = options.architecture;
    shape.dim = options.dim;
    shape.layers = options.layers;
    shape.heads = options.heads;
    shape.kv_heads = options.kv_heads > 0 ? options.kv_heads : options.heads;
    shape.ffn = options.ffn;
    shape.context = options.context;
    shape.seed = options.seed;
    shape.tie_embeddings = options.tie_embeddings;
    shape.vocabulary_from = options.vocabulary_from;
    auto type = kernels::tensor_type_from_name(options.type);
    if (!type) {
      std::cerr << "chatflow: unknown tensor type '" << options.type
                << "' (f32, f16, bf16, q8_0, q4_0)\n";
      return 2;
    }
    shape.type = *type;
    engine::write_random_model(shape, options.output);
    auto written = engine::GgufFile::open(options.output);
    const auto* tokens = written->find("tokenizer.ggml.tokens");
    int64_t vocabulary = tokens ? static_cast<int64_t>(tokens->strings.size()) : 0;
    std::cout << options.output << ": " << shape.architecture << ", "
              << engine::parameter_count(shape, vocabulary) << " parameters (" << options.type
              << "), vocabulary " << vocabulary << ", "
              << std::filesystem::file_size(options.output) << " bytes\n";
    return 0;
  } catch (const std::exception& error) {
    std::cerr << "chatflow: " << error.what() << "\n";
    return 1;
  }
}

}  // namespace chatflow::cli
