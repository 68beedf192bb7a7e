#include "framework/engine/model_writer.h"

#include <algorithm>
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

// A WordPiece vocabulary as llama.cpp's GGUF files hold BERT's: word-initial pieces carry U+2581
// (BERT's vocab.txt marks the others with "##" instead), special tokens first.
GeneratedVocabulary generate_wordpiece_vocabulary() {
  GeneratedVocabulary v;
  auto add = [&](std::string text, int32_t kind) {
    v.tokens.push_back(std::move(text));
    v.scores.push_back(0);
    v.kinds.push_back(kind);
  };
  for (const char* special : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"})
    add(special, std::string(special) == "[UNK]" ? 2 : 3);
  for (char c = 0x21; c <= 0x7E; ++c) {
    if (c >= 'A' && c <= 'Z') continue;  // BERT lower-cases before looking pieces up
    add("\xE2\x96\x81" + std::string(1, c), 1);
    add(std::string(1, c), 1);
  }
  for (const char* word : {"the", "and", "hello", "world", "embed", "token", "model", "vector",
                           "paris", "rain", "weather", "cat", "dog", "is", "of"})
    add("\xE2\x96\x81" + std::string(word), 1);
  for (const char* piece : {"ding", "ing", "ed", "izer", "er", "ly"})
    add(piece, 1);
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

// bert and nomic-bert: encoders for embeddings, with a WordPiece vocabulary.
bool is_encoder(const ModelShape& shape) {
  return shape.architecture == "bert" || shape.architecture == "nomic-bert";
}

bool is_gemma(const ModelShape& shape) {
  return shape.architecture == "gemma2" || shape.architecture == "gemma3";
}

int64_t sliding_window(const ModelShape& shape) {
  if (shape.sliding_window > 0) return shape.sliding_window;
  if (is_gemma(shape) || shape.architecture == "phi3")
    return std::max<int64_t>(16, shape.context / 4);
  return 0;
}

// Refuses shapes the engine could not load before anything is written.
void check_shape(const ModelShape& shape) {
  bool known = false;
  for (const char* arch : {"llama", "qwen2", "qwen2moe", "qwen3", "qwen3moe", "gemma2", "gemma3",
                           "phi3", "bert", "nomic-bert"})
    known = known || shape.architecture == arch;
  const std::string& pooling = shape.pooling;
  if (!pooling.empty() && pooling != "none" && pooling != "mean" && pooling != "cls" &&
      pooling != "last")
    throw std::invalid_argument("pooling must be none, mean, cls or last, got '" + pooling + "'");
  if (is_encoder(shape) &&
      (shape.kv_heads != shape.heads || shape.experts > 0 || shape.rope_scaling != "none" ||
       shape.sliding_window > 0 || shape.tie_embeddings))
    throw std::invalid_argument(
        "bert and nomic-bert have one key head per query head, no experts, rope scaling, "
        "sliding window or output matrix");
  if (!known) {
    throw std::invalid_argument("architecture must be one of " +
                                std::string(writable_architectures()) + ", got '" +
                                shape.architecture + "'");
  }
  const std::string& scaling = shape.rope_scaling;
  if (scaling != "none" && scaling != "linear" && scaling != "yarn" && scaling != "llama3" &&
      scaling != "longrope") {
    throw std::invalid_argument(
        "rope scaling must be none, linear, yarn, llama3 or longrope, got '" + scaling + "'");
  }
  if ((scaling == "longrope") != (shape.architecture == "phi3" && scaling == "longrope")) {
    throw std::invalid_argument("longrope is phi3's rope scaling");
  }
  const bool moe_family = shape.architecture == "qwen2moe" || shape.architecture == "qwen3moe";
  if (moe_family && shape.experts == 0)
    throw std::invalid_argument(shape.architecture + " needs --experts");
  if (shape.experts > 0) {
    if (shape.architecture != "llama" && !moe_family)
      throw std::invalid_argument(
          "experts are for llama (Mixtral's layout), qwen2moe and qwen3moe");
    if (shape.experts_used < 1 || shape.experts_used > shape.experts)
      throw std::invalid_argument("experts-used must be between 1 and the number of experts");
  }
  if (scaling == "llama3" && shape.architecture != "llama") {
    throw std::invalid_argument("llama3 rope scaling (rope_freqs) is for the llama architecture");
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

// <arch>.pooling_type as llama.cpp numbers it; bert says mean unless told otherwise.
void write_pooling(const ModelShape& shape, GgufWriter& writer) {
  std::string pooling = shape.pooling;
  if (pooling.empty() && is_encoder(shape)) pooling = "mean";
  if (pooling.empty()) return;
  const uint32_t type = pooling == "mean" ? 1 : pooling == "cls" ? 2 : pooling == "last" ? 3 : 0;
  writer.set_uint32(shape.architecture + ".pooling_type", type);
}

// The keys encoders and decoders both have: the architecture, the file type and the sizes.
void write_shared_hyperparameters(const ModelShape& shape, GgufWriter& writer) {
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
}

void write_encoder_hyperparameters(const ModelShape& shape, GgufWriter& writer) {
  const std::string& arch = shape.architecture;
  write_shared_hyperparameters(shape, writer);
  writer.set_float32(arch + ".attention.layer_norm_epsilon", 1e-12f);
  writer.set_bool(arch + ".attention.causal", false);
  // nomic-embed-text's rope base (its positions are rotary, not a table).
  if (arch == "nomic-bert") writer.set_float32(arch + ".rope.freq_base", 1000.0f);
  write_pooling(shape, writer);
}

void write_hyperparameters(const ModelShape& shape, GgufWriter& writer) {
  const std::string& arch = shape.architecture;
  if (is_encoder(shape)) return write_encoder_hyperparameters(shape, writer);
  write_pooling(shape, writer);
  write_shared_hyperparameters(shape, writer);
  writer.set_uint32(arch + ".attention.head_count_kv", static_cast<uint32_t>(shape.kv_heads));
  writer.set_float32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  writer.set_float32(arch + ".rope.freq_base", shape.rope_base);
  writer.set_uint32(arch + ".rope.dimension_count", static_cast<uint32_t>(shape.dim / shape.heads));
  if (shape.rope_scaling == "linear") {
    writer.set_string(arch + ".rope.scaling.type", "linear");
    writer.set_float32(arch + ".rope.scaling.factor", 2.0f);
  } else if (shape.rope_scaling == "yarn") {
    writer.set_string(arch + ".rope.scaling.type", "yarn");
    writer.set_float32(arch + ".rope.scaling.factor", 4.0f);
    writer.set_uint32(arch + ".rope.scaling.original_context_length",
                      static_cast<uint32_t>(std::max<int64_t>(1, shape.context / 4)));
  } else if (shape.rope_scaling == "longrope") {
    int64_t original = std::max<int64_t>(1, shape.context / 4);
    writer.set_uint32(arch + ".rope.scaling.original_context_length",
                      static_cast<uint32_t>(original));
    // Phi-3's magnitude correction for running beyond the original context.
    double ratio = static_cast<double>(shape.context) / static_cast<double>(original);
    writer.set_float32(arch + ".rope.scaling.attn_factor",
                       static_cast<float>(std::sqrt(
                           1.0 + std::log(ratio) / std::log(static_cast<double>(original)))));
  } else if (shape.architecture == "phi3") {
    writer.set_uint32(arch + ".rope.scaling.original_context_length",
                      static_cast<uint32_t>(shape.context));
  }
  if (shape.experts > 0) {
    writer.set_uint32(arch + ".expert_count", static_cast<uint32_t>(shape.experts));
    writer.set_uint32(arch + ".expert_used_count", static_cast<uint32_t>(shape.experts_used));
  }
  if (arch == "qwen2moe" || arch == "qwen3moe")
    writer.set_uint32(arch + ".expert_feed_forward_length", static_cast<uint32_t>(shape.ffn));
  if (arch == "qwen2moe") {
    writer.set_uint32(arch + ".expert_shared_feed_forward_length",
                      static_cast<uint32_t>(shape.ffn));
  }
  if (int64_t window = sliding_window(shape); window > 0)
    writer.set_uint32(arch + ".attention.sliding_window", static_cast<uint32_t>(window));
  if (shape.architecture == "gemma2") {
    writer.set_float32(arch + ".attn_logit_softcapping", 50.0f);
    writer.set_float32(arch + ".final_logit_softcapping", 30.0f);
  }
}

// Llama 3.1's rope scaling as rope_freqs factors: pairs whose wavelength is short against the
// original context (8192) keep their frequency, long ones are slowed by the factor (8), and
// those between blend smoothly (low and high frequency factors 1 and 4).
std::vector<float> llama3_frequency_factors(const ModelShape& shape) {
  constexpr double kFactor = 8, kLow = 1, kHigh = 4, kOriginal = 8192, kPi = 3.141592653589793;
  const int64_t dims = shape.dim / shape.heads;
  std::vector<float> factors;
  for (int64_t i = 0; i < dims / 2; ++i) {
    double frequency = std::pow(static_cast<double>(shape.rope_base),
                                -2.0 * static_cast<double>(i) / static_cast<double>(dims));
    double wavelength = 2 * kPi / frequency;
    double factor;
    if (wavelength < kOriginal / kHigh) {
      factor = 1;
    } else if (wavelength > kOriginal / kLow) {
      factor = kFactor;
    } else {
      double smooth = (kOriginal / wavelength - kLow) / (kHigh - kLow);
      factor = 1 / ((1 - smooth) / kFactor + smooth);
    }
    factors.push_back(static_cast<float>(factor));
  }
  return factors;
}

// Phi-3's LongRoPE factors: rising across the pairs, more for the long ones.
std::vector<float> longrope_factors(const ModelShape& shape, bool long_factors) {
  const int64_t pairs = shape.dim / shape.heads / 2;
  std::vector<float> factors;
  for (int64_t i = 0; i < pairs; ++i) {
    double position = static_cast<double>(i) / static_cast<double>(std::max<int64_t>(1, pairs - 1));
    factors.push_back(
        static_cast<float>(long_factors ? 1.0 + 7.0 * position : 1.0 + 0.25 * position));
  }
  return factors;
}

// Writes tokenizer.* (generated, or copied from shape.vocabulary_from) and returns the number of
// tokens, which sizes the embedding and output matrices.
int64_t write_vocabulary(const ModelShape& shape, GgufWriter& writer) {
  if (shape.vocabulary_from.empty() && is_encoder(shape)) {
    GeneratedVocabulary generated = generate_wordpiece_vocabulary();
    writer.set_string("tokenizer.ggml.model", "bert");
    writer.set_strings("tokenizer.ggml.tokens", generated.tokens);
    writer.set_float32s("tokenizer.ggml.scores", generated.scores);
    writer.set_int32s("tokenizer.ggml.token_type", generated.kinds);
    writer.set_uint32("tokenizer.ggml.token_type_count", 2);
    writer.set_uint32("tokenizer.ggml.padding_token_id", 0);
    writer.set_uint32("tokenizer.ggml.unknown_token_id", 1);
    writer.set_uint32("tokenizer.ggml.bos_token_id", 2);
    writer.set_uint32("tokenizer.ggml.seperator_token_id", 3);
    writer.set_uint32("tokenizer.ggml.mask_token_id", 4);
    writer.set_bool("tokenizer.ggml.add_bos_token", true);
    writer.set_bool("tokenizer.ggml.add_eos_token", true);
    return static_cast<int64_t>(generated.tokens.size());
  }
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
    weights(name, {columns, rows}, sigma);
  }

  // One [columns, rows] matrix per expert, stored as one [columns, rows, experts] tensor.
  void experts(const std::string& name, int64_t columns, int64_t rows, int64_t count, float sigma) {
    weights(name, {columns, rows, count}, sigma);
  }

  // A matrix kept in f32 whatever the shape's type: llama.cpp adds BERT's token-type row to f32
  // activations directly (and llama-quantize never quantises token_types.weight).
  void f32_matrix(const std::string& name, int64_t columns, int64_t rows, float sigma) {
    std::vector<float> values(static_cast<size_t>(columns * rows));
    for (float& value : values)
      value = normal_.next(sigma);
    writer_.add_tensor(name, {columns, rows}, kernels::TensorType::f32,
                       encode(kernels::TensorType::f32, values, columns));
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
  // Weights of any shape (rows of shape[0] values), quantised as the recipe says.
  void weights(const std::string& name, const std::vector<int64_t>& shape, float sigma) {
    size_t count = 1;
    for (int64_t extent : shape)
      count *= static_cast<size_t>(extent);
    std::vector<float> values(count);
    for (float& value : values)
      value = normal_.next(sigma);
    kernels::TensorType type = shape_.type;
    if (recipe_) {
      RecipeModel model{shape_.layers, shape_.heads / shape_.kv_heads, !shape_.tie_embeddings};
      type = recipe_tensor_type(*recipe_, model, name, shape[0], static_cast<int64_t>(shape.size()))
                 .value_or(type);
    }
    writer_.add_tensor(name, shape, type, encode(type, values, shape[0]));
  }

  GgufWriter& writer_;
  const ModelShape& shape_;
  std::optional<QuantizationRecipe> recipe_;
  NormalSource normal_;
};

void write_layer(const ModelShape& shape, int64_t layer, RandomTensors& tensors) {
  const int64_t head_dim = shape.dim / shape.heads;
  const int64_t q_dim = shape.heads * head_dim, kv_dim = shape.kv_heads * head_dim;
  const float scale = shape.weight_scale;
  const std::string& arch = shape.architecture;
  std::string prefix = "blk." + std::to_string(layer) + ".";
  tensors.vector(prefix + "attn_norm.weight", shape.dim, 1.0f, 0.1f);
  if (arch == "phi3") {
    tensors.matrix(prefix + "attn_qkv.weight", shape.dim, q_dim + 2 * kv_dim, scale);
  } else {
    tensors.matrix(prefix + "attn_q.weight", shape.dim, q_dim, scale);
    tensors.matrix(prefix + "attn_k.weight", shape.dim, kv_dim, scale);
    tensors.matrix(prefix + "attn_v.weight", shape.dim, kv_dim, scale);
  }
  tensors.matrix(prefix + "attn_output.weight", q_dim, shape.dim, scale);
  if (arch == "qwen2" || arch == "qwen2moe") {
    tensors.vector(prefix + "attn_q.bias", q_dim, 0.0f, 0.1f);
    tensors.vector(prefix + "attn_k.bias", kv_dim, 0.0f, 0.1f);
    tensors.vector(prefix + "attn_v.bias", kv_dim, 0.0f, 0.1f);
  }
  if (arch == "qwen3" || arch == "qwen3moe" || arch == "gemma3") {
    tensors.vector(prefix + "attn_q_norm.weight", head_dim, 1.0f, 0.1f);
    tensors.vector(prefix + "attn_k_norm.weight", head_dim, 1.0f, 0.1f);
  }
  if (is_gemma(shape)) tensors.vector(prefix + "post_attention_norm.weight", shape.dim, 1.0f, 0.1f);
  tensors.vector(prefix + "ffn_norm.weight", shape.dim, 1.0f, 0.1f);
  if (shape.experts > 0) {
    tensors.matrix(prefix + "ffn_gate_inp.weight", shape.dim, shape.experts, scale);
    tensors.experts(prefix + "ffn_gate_exps.weight", shape.dim, shape.ffn, shape.experts, scale);
    tensors.experts(prefix + "ffn_up_exps.weight", shape.dim, shape.ffn, shape.experts, scale);
    tensors.experts(prefix + "ffn_down_exps.weight", shape.ffn, shape.dim, shape.experts, scale);
    if (arch == "qwen2moe") {
      tensors.vector(prefix + "ffn_gate_inp_shexp.weight", shape.dim, 0.0f, scale);
      tensors.matrix(prefix + "ffn_gate_shexp.weight", shape.dim, shape.ffn, scale);
      tensors.matrix(prefix + "ffn_up_shexp.weight", shape.dim, shape.ffn, scale);
      tensors.matrix(prefix + "ffn_down_shexp.weight", shape.ffn, shape.dim, scale);
    }
    if (is_gemma(shape)) tensors.vector(prefix + "post_ffw_norm.weight", shape.dim, 1.0f, 0.1f);
    return;
  }
  if (arch == "phi3") {
    tensors.matrix(prefix + "ffn_up.weight", shape.dim, 2 * shape.ffn, scale);
  } else {
    tensors.matrix(prefix + "ffn_gate.weight", shape.dim, shape.ffn, scale);
    tensors.matrix(prefix + "ffn_up.weight", shape.dim, shape.ffn, scale);
  }
  tensors.matrix(prefix + "ffn_down.weight", shape.ffn, shape.dim, scale);
  if (is_gemma(shape)) tensors.vector(prefix + "post_ffw_norm.weight", shape.dim, 1.0f, 0.1f);
}

// BERT as llama.cpp reads it: embeddings of tokens, two token types and every position, their
// LayerNorm, then per layer attention with biases, its LayerNorm, a GELU feed-forward with
// biases and the output LayerNorm. nomic-bert: no position table (rotary), one fused qkv
// matrix, a SwiGLU feed-forward, no biases but the LayerNorms'. LayerNorm weights are
// 1 + noise, biases noise.
void write_encoder_weights(const ModelShape& shape, int64_t vocabulary, GgufWriter& writer) {
  RandomTensors tensors(writer, shape);
  const int64_t dim = shape.dim;
  const float scale = shape.weight_scale;
  const bool nomic = shape.architecture == "nomic-bert";
  tensors.matrix("token_embd.weight", dim, vocabulary, 1.0f);
  tensors.f32_matrix("token_types.weight", dim, 2, 0.5f);
  if (!nomic) tensors.matrix("position_embd.weight", dim, shape.context, 0.5f);
  tensors.vector("token_embd_norm.weight", dim, 1.0f, 0.1f);
  tensors.vector("token_embd_norm.bias", dim, 0.0f, 0.1f);
  for (int64_t layer = 0; layer < shape.layers; ++layer) {
    std::string prefix = "blk." + std::to_string(layer) + ".";
    if (nomic) {
      tensors.matrix(prefix + "attn_qkv.weight", dim, 3 * dim, scale);
      tensors.matrix(prefix + "attn_output.weight", dim, dim, scale);
    } else {
      for (const char* name : {"attn_q", "attn_k", "attn_v", "attn_output"}) {
        tensors.matrix(prefix + name + ".weight", dim, dim, scale);
        tensors.vector(prefix + name + ".bias", dim, 0.0f, 0.1f);
      }
    }
    tensors.vector(prefix + "attn_output_norm.weight", dim, 1.0f, 0.1f);
    tensors.vector(prefix + "attn_output_norm.bias", dim, 0.0f, 0.1f);
    tensors.matrix(prefix + "ffn_up.weight", dim, shape.ffn, scale);
    if (nomic) tensors.matrix(prefix + "ffn_gate.weight", dim, shape.ffn, scale);
    if (!nomic) tensors.vector(prefix + "ffn_up.bias", shape.ffn, 0.0f, 0.1f);
    tensors.matrix(prefix + "ffn_down.weight", shape.ffn, dim, scale);
    if (!nomic) tensors.vector(prefix + "ffn_down.bias", dim, 0.0f, 0.1f);
    tensors.vector(prefix + "layer_output_norm.weight", dim, 1.0f, 0.1f);
    tensors.vector(prefix + "layer_output_norm.bias", dim, 0.0f, 0.1f);
  }
}

void write_weights(const ModelShape& shape, int64_t vocabulary, GgufWriter& writer) {
  if (is_encoder(shape)) return write_encoder_weights(shape, vocabulary, writer);
  RandomTensors tensors(writer, shape);
  tensors.matrix("token_embd.weight", shape.dim, vocabulary, 1.0f);
  tensors.vector("output_norm.weight", shape.dim, 1.0f, 0.1f);
  // Gemma ties its output to the embeddings: its files have no output matrix.
  if (!shape.tie_embeddings && !is_gemma(shape))
    tensors.matrix("output.weight", shape.dim, vocabulary, shape.weight_scale);
  auto add_factors = [&](const std::string& name, const std::vector<float>& factors) {
    writer.add_tensor(
        name, {static_cast<int64_t>(factors.size())}, kernels::TensorType::f32,
        encode(kernels::TensorType::f32, factors, static_cast<int64_t>(factors.size())));
  };
  if (shape.rope_scaling == "llama3")
    add_factors("rope_freqs.weight", llama3_frequency_factors(shape));
  if (shape.architecture == "phi3") {
    add_factors("rope_factors_long.weight", longrope_factors(shape, true));
    add_factors("rope_factors_short.weight", longrope_factors(shape, false));
  }
  for (int64_t layer = 0; layer < shape.layers; ++layer)
    write_layer(shape, layer, tensors);
}

}  // namespace

const char* writable_architectures() {
  return "llama, qwen2, qwen2moe, qwen3, qwen3moe, gemma2, gemma3, phi3, bert, nomic-bert";
}

int64_t parameter_count(const ModelShape& shape, int64_t vocabulary) {
  if (shape.architecture == "bert") {
    const int64_t per_layer =
        4 * shape.dim * shape.dim + 2 * shape.dim * shape.ffn + 9 * shape.dim + shape.ffn;
    return shape.layers * per_layer + (vocabulary + 2 + shape.context) * shape.dim + 2 * shape.dim;
  }
  if (shape.architecture == "nomic-bert") {
    const int64_t per_layer = 4 * shape.dim * shape.dim + 3 * shape.dim * shape.ffn + 4 * shape.dim;
    return shape.layers * per_layer + (vocabulary + 2) * shape.dim + 2 * shape.dim;
  }
  int64_t head_dim = shape.dim / shape.heads;
  const int64_t ffn_networks =
      shape.experts == 0 ? 1 : shape.experts + (shape.architecture == "qwen2moe" ? 1 : 0);
  int64_t per_layer =
      shape.dim * shape.heads * head_dim * 2 + shape.dim * shape.kv_heads * head_dim * 2 +
      3 * shape.dim * shape.ffn * ffn_networks + shape.dim * shape.experts + 2 * shape.dim;
  const bool tied = shape.tie_embeddings || is_gemma(shape);
  return shape.layers * per_layer + vocabulary * shape.dim * (tied ? 1 : 2) + shape.dim;
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
