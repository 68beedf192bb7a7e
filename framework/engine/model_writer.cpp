#include "framework/engine/model_writer.h"

#include <cmath>
#include <optional>
#include <random>
#include <stdexcept>

#include "framework/engine/gguf_writer.h"
#include "framework/engine/quantization_recipe.h"
#include "kernels/quantize.h"

namespace chatflow::engine {
namespace {

// Normal(0, sigma) from our own Box-Muller over mt19937_64, so a seed writes the same model on
// every platform.
class NormalSource {
 public:
  explicit NormalSource(uint64_t seed) : random_(seed) {}
  float next(float sigma) {
    double u1 = (static_cast<double>(random_() >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = static_cast<double>(random_() >> 11) * (1.0 / 9007199254740992.0);
    return static_cast<float>(sigma * std::sqrt(-2.0 * std::log(u1)) *
                              std::cos(6.283185307179586 * u2));
  }

 private:
  std::mt19937_64 random_;
};

struct GeneratedVocabulary {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> kinds;
};

GeneratedVocabulary generate_vocabulary() {
  GeneratedVocabulary v;
  auto add = [&](std::string text, float score, int32_t kind) {
    v.tokens.push_back(std::move(text));
    v.scores.push_back(score);
    v.kinds.push_back(kind);
  };
  add("<unk>", 0, 2);
  add("<s>", 0, 3);
  add("</s>", 0, 3);
  static const char* kHex = "0123456789ABCDEF";
  for (int byte = 0; byte < 256; ++byte)
    add(std::string("<0x") + kHex[byte >> 4] + kHex[byte & 15] + ">", 0, 6);
  float score = -1;
  add("\xE2\x96\x81", score--, 1);
  for (char c = 0x21; c <= 0x7E; ++c)
    add(std::string(1, c), score--, 1);
  for (const char* piece : {"the", "and", "was", "to", "he", "she", "it", "in", "of", "a"}) {
    add("\xE2\x96\x81" + std::string(piece), score--, 1);
  }
  return v;
}

std::vector<uint8_t> encode(kernels::TensorType type, const std::vector<float>& values,
                            int64_t columns) {
  int64_t rows = static_cast<int64_t>(values.size()) / columns;
  std::vector<uint8_t> bytes(kernels::row_bytes(type, columns) * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    kernels::quantize_row(type, values.data() + r * columns, columns,
                          bytes.data() + r * kernels::row_bytes(type, columns));
  }
  return bytes;
}

// Refuses shapes the engine could not load before anything is written.
void check_shape(const ModelShape& shape) {
  if (shape.architecture != "llama" && shape.architecture != "qwen2") {
    throw std::invalid_argument("architecture must be llama or qwen2, got '" + shape.architecture +
                                "'");
  }
  if (shape.dim <= 0 || shape.layers <= 0 || shape.heads <= 0 || shape.kv_heads <= 0 ||
      shape.ffn <= 0 || shape.context <= 0) {
    throw std::invalid_argument("every size must be positive");
  }
  if (shape.dim % shape.heads != 0 || shape.heads % shape.kv_heads != 0 ||
      (shape.dim / shape.heads) % 2 != 0) {
    throw std::invalid_argument(
        "dim must split into an even head size, and heads into kv-heads groups");
  }
  if (!shape.recipe.empty()) {
    // A scheme falls back to a smaller block (and at last to f16) where a row does not fit.
    if (!quantization_recipe(shape.recipe)) {
      throw std::invalid_argument("unknown quantisation type '" + shape.recipe +
                                  "' (expected one of: " + quantization_recipe_names() + ")");
    }
    return;
  }
  int64_t block = kernels::block_values(shape.type);
  if (shape.dim % block != 0 || shape.ffn % block != 0) {
    throw std::invalid_argument(std::string(kernels::to_string(shape.type)) +
                                " needs dim and ffn to be multiples of " + std::to_string(block));
  }
}

void write_hyperparameters(const ModelShape& shape, GgufWriter& writer) {
  const std::string& arch = shape.architecture;
  writer.set_string("general.architecture", arch);
  writer.set_string("general.name", "chatflow-random-" + arch);
  writer.set_uint32("general.alignment", 32);
  if (!shape.recipe.empty())
    writer.set_uint32("general.file_type", quantization_recipe(shape.recipe)->file_type);
  writer.set_uint32(arch + ".context_length", static_cast<uint32_t>(shape.context));
  writer.set_uint32(arch + ".embedding_length", static_cast<uint32_t>(shape.dim));
  writer.set_uint32(arch + ".block_count", static_cast<uint32_t>(shape.layers));
  writer.set_uint32(arch + ".feed_forward_length", static_cast<uint32_t>(shape.ffn));
  writer.set_uint32(arch + ".attention.head_count", static_cast<uint32_t>(shape.heads));
  writer.set_uint32(arch + ".attention.head_count_kv", static_cast<uint32_t>(shape.kv_heads));
  writer.set_float32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  writer.set_float32(arch + ".rope.freq_base", shape.rope_base);
  writer.set_uint32(arch + ".rope.dimension_count", static_cast<uint32_t>(shape.dim / shape.heads));
}

// Writes tokenizer.* (generated, or copied from shape.vocabulary_from) and returns the number of
// tokens, which sizes the embedding and output matrices.
int64_t write_vocabulary(const ModelShape& shape, GgufWriter& writer) {
  if (shape.vocabulary_from.empty()) {
    GeneratedVocabulary generated = generate_vocabulary();
    writer.set_string("tokenizer.ggml.model", "llama");
    writer.set_string("tokenizer.ggml.pre", "default");
    writer.set_strings("tokenizer.ggml.tokens", generated.tokens);
    writer.set_float32s("tokenizer.ggml.scores", generated.scores);
    writer.set_int32s("tokenizer.ggml.token_type", generated.kinds);
    writer.set_uint32("tokenizer.ggml.unknown_token_id", 0);
    writer.set_uint32("tokenizer.ggml.bos_token_id", 1);
    writer.set_uint32("tokenizer.ggml.eos_token_id", 2);
    writer.set_bool("tokenizer.ggml.add_bos_token", true);
    return static_cast<int64_t>(generated.tokens.size());
  }
  auto source = GgufFile::open(shape.vocabulary_from);
  for (const auto& [key, value] : source->metadata()) {
    if (key.rfind("tokenizer.", 0) == 0) writer.copy(*source, key);
  }
  const GgufValue* tokens = source->find("tokenizer.ggml.tokens");
  if (tokens == nullptr)
    throw std::invalid_argument(shape.vocabulary_from + " has no tokenizer.ggml.tokens");
  return static_cast<int64_t>(tokens->strings.size());
}

// Adds tensors of random values, all drawn from one stream in the order they are added, so the
// order of the calls is part of what a seed means.
class RandomTensors {
 public:
  RandomTensors(GgufWriter& writer, const ModelShape& shape)
      : writer_(writer), shape_(shape), normal_(shape.seed) {
    if (!shape.recipe.empty()) recipe_ = quantization_recipe(shape.recipe);
  }

  // A weight matrix of `rows` rows of `columns` values, Normal(0, sigma), in the shape's type.
  void matrix(const std::string& name, int64_t columns, int64_t rows, float sigma) {
    std::vector<float> values(static_cast<size_t>(columns * rows));
    for (float& value : values)
      value = normal_.next(sigma);
    kernels::TensorType type = shape_.type;
    if (recipe_) {
      RecipeModel model{shape_.layers, shape_.heads / shape_.kv_heads, !shape_.tie_embeddings};
      type = recipe_tensor_type(*recipe_, model, name, columns, 2).value_or(type);
    }
    writer_.add_tensor(name, {columns, rows}, type, encode(type, values, columns));
  }

  // A norm weight or bias, center + Normal(0, sigma), always f32.
  void vector(const std::string& name, int64_t length, float center, float sigma) {
    std::vector<float> values(static_cast<size_t>(length));
    for (float& value : values)
      value = center + normal_.next(sigma);
    writer_.add_tensor(name, {length}, kernels::TensorType::f32,
                       encode(kernels::TensorType::f32, values, length));
  }

 private:
  GgufWriter& writer_;
  const ModelShape& shape_;
  std::optional<QuantizationRecipe> recipe_;
  NormalSource normal_;
};

void write_layer(const ModelShape& shape, int64_t layer, RandomTensors& tensors) {
  const int64_t head_dim = shape.dim / shape.heads;
  const float scale = shape.weight_scale;
  std::string prefix = "blk." + std::to_string(layer) + ".";
  tensors.vector(prefix + "attn_norm.weight", shape.dim, 1.0f, 0.1f);
  tensors.matrix(prefix + "attn_q.weight", shape.dim, shape.heads * head_dim, scale);
  tensors.matrix(prefix + "attn_k.weight", shape.dim, shape.kv_heads * head_dim, scale);
  tensors.matrix(prefix + "attn_v.weight", shape.dim, shape.kv_heads * head_dim, scale);
  tensors.matrix(prefix + "attn_output.weight", shape.heads * head_dim, shape.dim, scale);
  if (shape.architecture == "qwen2") {
    tensors.vector(prefix + "attn_q.bias", shape.heads * head_dim, 0.0f, 0.1f);
    tensors.vector(prefix + "attn_k.bias", shape.kv_heads * head_dim, 0.0f, 0.1f);
    tensors.vector(prefix + "attn_v.bias", shape.kv_heads * head_dim, 0.0f, 0.1f);
  }
  tensors.vector(prefix + "ffn_norm.weight", shape.dim, 1.0f, 0.1f);
  tensors.matrix(prefix + "ffn_gate.weight", shape.dim, shape.ffn, scale);
  tensors.matrix(prefix + "ffn_up.weight", shape.dim, shape.ffn, scale);
  tensors.matrix(prefix + "ffn_down.weight", shape.ffn, shape.dim, scale);
}

void write_weights(const ModelShape& shape, int64_t vocabulary, GgufWriter& writer) {
  RandomTensors tensors(writer, shape);
  tensors.matrix("token_embd.weight", shape.dim, vocabulary, 1.0f);
  tensors.vector("output_norm.weight", shape.dim, 1.0f, 0.1f);
  if (!shape.tie_embeddings)
    tensors.matrix("output.weight", shape.dim, vocabulary, shape.weight_scale);
  for (int64_t layer = 0; layer < shape.layers; ++layer)
    write_layer(shape, layer, tensors);
}

}  // namespace

int64_t parameter_count(const ModelShape& shape, int64_t vocabulary) {
  int64_t head_dim = shape.dim / shape.heads;
  int64_t per_layer = shape.dim * shape.heads * head_dim * 2 +
                      shape.dim * shape.kv_heads * head_dim * 2 + 3 * shape.dim * shape.ffn +
                      2 * shape.dim;
  return shape.layers * per_layer + vocabulary * shape.dim * (shape.tie_embeddings ? 1 : 2) +
         shape.dim;
}

void write_random_model(const ModelShape& shape, const std::string& path) {
  check_shape(shape);
  GgufWriter writer;
  write_hyperparameters(shape, writer);
  int64_t vocabulary = write_vocabulary(shape, writer);
  write_weights(shape, vocabulary, writer);
  writer.write(path);
}

}  // namespace chatflow::engine
