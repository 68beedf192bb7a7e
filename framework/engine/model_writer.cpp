#include "framework/engine/model_writer.h"

#include <cmath>
#include <random>
#include <stdexcept>

#include "framework/engine/gguf_writer.h"
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

}  // namespace

int64_t parameter_count(const ModelShape& s, int64_t vocabulary) {
  int64_t head_dim = s.dim / s.heads;
  int64_t per_layer = s.dim * s.heads * head_dim * 2 + s.dim * s.kv_heads * head_dim * 2 +
                      3 * s.dim * s.ffn + 2 * s.dim;
  return s.layers * per_layer + vocabulary * s.dim * (s.tie_embeddings ? 1 : 2) + s.dim;
}

void write_random_model(const ModelShape& s, const std::string& path) {
  if (s.architecture != "llama" && s.architecture != "qwen2") {
    throw std::invalid_argument("architecture must be llama or qwen2, got '" + s.architecture +
                                "'");
  }
  if (s.dim <= 0 || s.layers <= 0 || s.heads <= 0 || s.kv_heads <= 0 || s.ffn <= 0 ||
      s.context <= 0) {
    throw std::invalid_argument("every size must be positive");
  }
  if (s.dim % s.heads != 0 || s.heads % s.kv_heads != 0 || (s.dim / s.heads) % 2 != 0) {
    throw std::invalid_argument(
        "dim must split into an even head size, and heads into kv-heads groups");
  }
  int64_t block = kernels::block_values(s.type);
  if (s.dim % block != 0 || s.ffn % block != 0) {
    throw std::invalid_argument(std::string(kernels::to_string(s.type)) +
                                " needs dim and ffn to be multiples of " + std::to_string(block));
  }
  GgufWriter writer;
  const std::string& arch = s.architecture;
  writer.set_string("general.architecture", arch);
  writer.set_string("general.name", "chatflow-random-" + arch);
  writer.set_uint32("general.alignment", 32);
  writer.set_uint32(arch + ".context_length", static_cast<uint32_t>(s.context));
  writer.set_uint32(arch + ".embedding_length", static_cast<uint32_t>(s.dim));
  writer.set_uint32(arch + ".block_count", static_cast<uint32_t>(s.layers));
  writer.set_uint32(arch + ".feed_forward_length", static_cast<uint32_t>(s.ffn));
  writer.set_uint32(arch + ".attention.head_count", static_cast<uint32_t>(s.heads));
  writer.set_uint32(arch + ".attention.head_count_kv", static_cast<uint32_t>(s.kv_heads));
  writer.set_float32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  writer.set_float32(arch + ".rope.freq_base", s.rope_base);
  writer.set_uint32(arch + ".rope.dimension_count", static_cast<uint32_t>(s.dim / s.heads));

  int64_t vocabulary = 0;
  if (s.vocabulary_from.empty()) {
    GeneratedVocabulary generated = generate_vocabulary();
    vocabulary = static_cast<int64_t>(generated.tokens.size());
    writer.set_string("tokenizer.ggml.model", "llama");
    writer.set_string("tokenizer.ggml.pre", "default");
    writer.set_strings("tokenizer.ggml.tokens", generated.tokens);
    writer.set_float32s("tokenizer.ggml.scores", generated.scores);
    writer.set_int32s("tokenizer.ggml.token_type", generated.kinds);
    writer.set_uint32("tokenizer.ggml.unknown_token_id", 0);
    writer.set_uint32("tokenizer.ggml.bos_token_id", 1);
    writer.set_uint32("tokenizer.ggml.eos_token_id", 2);
    writer.set_bool("tokenizer.ggml.add_bos_token", true);
  } else {
    auto source = GgufFile::open(s.vocabulary_from);
    for (const auto& [key, value] : source->metadata()) {
      if (key.rfind("tokenizer.", 0) == 0) writer.copy(*source, key);
    }
    const GgufValue* tokens = source->find("tokenizer.ggml.tokens");
    if (tokens == nullptr)
      throw std::invalid_argument(s.vocabulary_from + " has no tokenizer.ggml.tokens");
    vocabulary = static_cast<int64_t>(tokens->strings.size());
  }

  NormalSource normal(s.seed);
  const int64_t head_dim = s.dim / s.heads;
  auto matrix = [&](const std::string& name, int64_t columns, int64_t rows, float sigma) {
    std::vector<float> values(static_cast<size_t>(columns * rows));
    for (float& value : values)
      value = normal.next(sigma);
    writer.add_tensor(name, {columns, rows}, s.type, encode(s.type, values, columns));
  };
  auto vector = [&](const std::string& name, int64_t length, float center, float sigma) {
    std::vector<float> values(static_cast<size_t>(length));
    for (float& value : values)
      value = center + normal.next(sigma);
    writer.add_tensor(name, {length}, kernels::TensorType::f32,
                      encode(kernels::TensorType::f32, values, length));
  };
  const float scale = s.weight_scale;
  matrix("token_embd.weight", s.dim, vocabulary, 1.0f);
  vector("output_norm.weight", s.dim, 1.0f, 0.1f);
  if (!s.tie_embeddings) matrix("output.weight", s.dim, vocabulary, scale);
  for (int64_t layer = 0; layer < s.layers; ++layer) {
    std::string prefix = "blk." + std::to_string(layer) + ".";
    vector(prefix + "attn_norm.weight", s.dim, 1.0f, 0.1f);
    matrix(prefix + "attn_q.weight", s.dim, s.heads * head_dim, scale);
    matrix(prefix + "attn_k.weight", s.dim, s.kv_heads * head_dim, scale);
    matrix(prefix + "attn_v.weight", s.dim, s.kv_heads * head_dim, scale);
    matrix(prefix + "attn_output.weight", s.heads * head_dim, s.dim, scale);
    if (arch == "qwen2") {
      vector(prefix + "attn_q.bias", s.heads * head_dim, 0.0f, 0.1f);
      vector(prefix + "attn_k.bias", s.kv_heads * head_dim, 0.0f, 0.1f);
      vector(prefix + "attn_v.bias", s.kv_heads * head_dim, 0.0f, 0.1f);
    }
    vector(prefix + "ffn_norm.weight", s.dim, 1.0f, 0.1f);
    matrix(prefix + "ffn_gate.weight", s.dim, s.ffn, scale);
    matrix(prefix + "ffn_up.weight", s.dim, s.ffn, scale);
    matrix(prefix + "ffn_down.weight", s.ffn, s.dim, scale);
  }
  writer.write(path);
}

}  // namespace chatflow::engine
