#include "framework/engine/embedding_model.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>

#include <tbb/parallel_for.h>

#include "framework/engine/model.h"
#include "framework/engine/step_math.h"

namespace chatflow::engine {
namespace {

// Row `row` of `matrix` as floats: the file's own bytes for f32, else dequantised into `buffer`
// (columns floats). Weights stay in their file type, memory-mapped: a row is dequantised once per
// product and used for every token of the input.
const float* row_floats(const WeightMatrix& matrix, int64_t row, float* buffer) {
  if (matrix.type == kernels::TensorType::f32)
    return reinterpret_cast<const float*>(matrix.data +
                                          static_cast<size_t>(row) * matrix.row_bytes);
  dequantize_row(matrix, row, buffer);
  return buffer;
}

// Without -march the build targets baseline x86-64 (SSE2); an AVX2+FMA copy is chosen at run
// time where the CPU has it. Not under ThreadSanitizer: target_clones' ifunc resolver is
// instrumented and runs while the program is relocated, before TSan's runtime is up, and the
// program crashes before main (the TSan build computes the same sums in the baseline copy).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define CHATFLOW_VECTOR_CLONES [[gnu::target_clones("arch=haswell", "default")]]
#else
#define CHATFLOW_VECTOR_CLONES
#endif

// The inner product of two rows, in 32 partial sums the compiler keeps in vector registers.
CHATFLOW_VECTOR_CLONES
float dot(const float* a, const float* b, int64_t count) {
  float partial[32] = {};
  int64_t i = 0;
  for (; i + 32 <= count; i += 32) {
    for (int k = 0; k < 32; ++k)
      partial[k] += a[i + k] * b[i + k];
  }
  float sum = 0;
  for (; i < count; ++i)
    sum += a[i] * b[i];
  for (float value : partial)
    sum += value;
  return sum;
}

// dot(row, x[t]) for four consecutive rows x[0..3] of `count` values: each piece of `row` is
// loaded once for all four.
CHATFLOW_VECTOR_CLONES
void dot4(const float* row, const float* x, int64_t count, float* out) {
  float partial[4][8] = {};
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    for (int t = 0; t < 4; ++t) {
      for (int k = 0; k < 8; ++k)
        partial[t][k] += row[i + k] * x[t * count + i + k];
    }
  }
  for (int t = 0; t < 4; ++t) {
    float sum = 0;
    for (int64_t j = i; j < count; ++j)
      sum += row[j] * x[t * count + j];
    for (float value : partial[t])
      sum += value;
    out[t] = sum;
  }
}

// y[t][r] = sum_i w[r][i] * x[t][i] (+ bias[r]) for `tokens` rows of x.
void multiply(const WeightMatrix& w, const std::vector<float>& bias, const float* x, int64_t tokens,
              float* y) {
  const int64_t grain = std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(1, w.columns * tokens));
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, w.rows, grain), [&](const auto& range) {
    std::vector<float> buffer(static_cast<size_t>(w.columns));
    for (int64_t r = range.begin(); r < range.end(); ++r) {
      const float* row = row_floats(w, r, buffer.data());
      const float add = bias.empty() ? 0.0f : bias[static_cast<size_t>(r)];
      int64_t t = 0;
      for (float sums[4]; t + 4 <= tokens; t += 4) {
        dot4(row, x + t * w.columns, w.columns, sums);
        for (int k = 0; k < 4; ++k)
          y[(t + k) * w.rows + r] = sums[k] + add;
      }
      for (; t < tokens; ++t)
        y[t * w.rows + r] = dot(row, x + t * w.columns, w.columns) + add;
    }
  });
}

// ggml_norm, then weight and bias: (x - mean) / sqrt(variance + epsilon) * weight + bias.
void layer_norm(float* rows, int64_t tokens, int64_t width, const std::vector<float>& weight,
                const std::vector<float>& bias, float epsilon) {
  for (int64_t t = 0; t < tokens; ++t) {
    float* x = rows + t * width;
    double mean = 0;
    for (int64_t i = 0; i < width; ++i)
      mean += x[i];
    mean /= static_cast<double>(width);
    double variance = 0;
    for (int64_t i = 0; i < width; ++i)
      variance += (x[i] - mean) * (x[i] - mean);
    variance /= static_cast<double>(width);
    const double scale = 1.0 / std::sqrt(variance + epsilon);
    for (int64_t i = 0; i < width; ++i)
      x[i] = static_cast<float>((x[i] - mean) * scale) * weight[static_cast<size_t>(i)] +
             bias[static_cast<size_t>(i)];
  }
}

// x / sqrt(mean(x^2) + epsilon) * weight, the mean summed in double (as the CPU kernels do).
void rms_norm(const float* x, const float* weight, float* out, int64_t count, float epsilon) {
  double sum = 0;
  for (int64_t i = 0; i < count; ++i)
    sum += static_cast<double>(x[i] * x[i]);
  const float scale =
      1.0f / std::sqrt(static_cast<float>(sum / static_cast<double>(count)) + epsilon);
  for (int64_t i = 0; i < count; ++i)
    out[i] = (x[i] * scale) * weight[i];
}

float silu(float x) {
  return x / (1.0f + std::exp(-x));
}

float gelu(float x) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + 0.044715f * x * x)));
}

// Scaled dot-product attention of every head over one sequence: each query sees every position
// (bidirectional) or those up to its own (causal). Keys and values may have fewer heads (GQA).
void attend(const float* query, const float* key, const float* value, int64_t tokens, int64_t heads,
            int64_t kv_heads, int64_t head_dim, float scale, bool causal, float* out) {
  const int64_t q_dim = heads * head_dim, kv_dim = kv_heads * head_dim;
  const int64_t group = heads / kv_heads;
  tbb::parallel_for(int64_t{0}, heads, [&](int64_t h) {
    std::vector<float> scores(static_cast<size_t>(tokens));
    const int64_t g = h / group;
    for (int64_t t = 0; t < tokens; ++t) {
      const float* q = query + t * q_dim + h * head_dim;
      const int64_t seen = causal ? t + 1 : tokens;
      float highest = -INFINITY;
      for (int64_t s = 0; s < seen; ++s) {
        scores[static_cast<size_t>(s)] = dot(q, key + s * kv_dim + g * head_dim, head_dim) * scale;
        highest = std::max(highest, scores[static_cast<size_t>(s)]);
      }
      double total = 0;
      for (int64_t s = 0; s < seen; ++s) {
        scores[static_cast<size_t>(s)] = std::exp(scores[static_cast<size_t>(s)] - highest);
        total += scores[static_cast<size_t>(s)];
      }
      float* o = out + t * q_dim + h * head_dim;
      std::fill(o, o + head_dim, 0.0f);
      for (int64_t s = 0; s < seen; ++s) {
        const float weight = static_cast<float>(scores[static_cast<size_t>(s)] / total);
        const float* v = value + s * kv_dim + g * head_dim;
        for (int64_t i = 0; i < head_dim; ++i)
          o[i] += weight * v[i];
      }
    }
  });
}

// Rotates each token's heads by its position (0, 1, ...), as llama.cpp's rope does.
void rotate(const ModelConfig& config, float* rows, int64_t tokens, int64_t heads) {
  const int64_t pairs = config.rope_dimensions / 2;
  std::vector<int64_t> positions(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t)
    positions[static_cast<size_t>(t)] = t;
  std::vector<float> cosines(static_cast<size_t>(tokens * pairs)), sines(cosines.size());
  rope_angles(config, config.rope, positions, cosines.data(), sines.data());
  // Pair i is (2i, 2i + 1) in llama's layout, (i, i + pairs) in NeoX's.
  const bool adjacent = config.rope_style == RopeStyle::adjacent_pairs;
  for (int64_t t = 0; t < tokens; ++t) {
    const float* cos = cosines.data() + t * pairs;
    const float* sin = sines.data() + t * pairs;
    for (int64_t h = 0; h < heads; ++h) {
      float* head = rows + (t * heads + h) * config.head_dim;
      for (int64_t i = 0; i < pairs; ++i) {
        float& a = head[adjacent ? 2 * i : i];
        float& b = head[adjacent ? 2 * i + 1 : i + pairs];
        const float x0 = a, x1 = b;
        a = x0 * cos[i] - x1 * sin[i];
        b = x0 * sin[i] + x1 * cos[i];
      }
    }
  }
}

// Reads the tensors of a file the decoder Model does not load (bert, nomic-bert).
class TensorReader {
 public:
  explicit TensorReader(const GgufFile& file) : file_(file) {}

  const GgufTensorInfo& tensor(const std::string& name, const std::vector<int64_t>& shape) {
    const GgufTensorInfo* info = file_.find_tensor(name);
    if (info == nullptr) throw GgufError(file_.path() + ": tensor '" + name + "' is missing");
    if (!kernels::computable(info->type)) {
      throw GgufError(file_.path() + ": tensor '" + name + "' has type " +
                      std::string(kernels::to_string(info->type)) +
                      ", which chatflow cannot compute with");
    }
    if (info->shape != shape) {
      throw GgufError(file_.path() + ": tensor '" + name + "' has shape " + info->shape_text() +
                      ", expected [" + std::to_string(shape[0]) +
                      (shape.size() > 1 ? ", " + std::to_string(shape[1]) : "") + "]");
    }
    used_.insert(name);
    return *info;
  }
  WeightMatrix matrix(const std::string& name, int64_t columns, int64_t rows) {
    const GgufTensorInfo& info = tensor(name, {columns, rows});
    return {info.type, info.data, rows, columns, kernels::row_bytes(info.type, columns)};
  }
  std::vector<float> vector(const std::string& name, int64_t length) {
    return matrix_values(tensor(name, {length}), length);
  }
  // The first `rows` rows of a [columns, any] tensor.
  WeightMatrix table(const std::string& name, int64_t columns) {
    const GgufTensorInfo* info = file_.find_tensor(name);
    if (info == nullptr) throw GgufError(file_.path() + ": tensor '" + name + "' is missing");
    return matrix(name, columns, info->shape.size() == 2 ? info->shape[1] : 0);
  }
  // Every tensor must have been read: one this code does not use would be silently ignored.
  void refuse_unused(const std::string& architecture) const {
    for (const auto& tensor : file_.tensors()) {
      if (used_.count(tensor.name) > 0) continue;
      throw GgufError(file_.path() + ": tensor '" + tensor.name + "' is not part of the " +
                      architecture +
                      " embedding model as chatflow computes it (a classification head?); "
                      "refusing the file rather than ignoring the tensor");
    }
  }

 private:
  static std::vector<float> matrix_values(const GgufTensorInfo& info, int64_t length) {
    std::vector<float> values(static_cast<size_t>(length));
    dequantize_row({info.type, info.data, 1, length, kernels::row_bytes(info.type, length)}, 0,
                   values.data());
    return values;
  }
  const GgufFile& file_;
  std::set<std::string> used_;
};

Pooling file_pooling(const GgufFile& file, const std::string& architecture, Pooling chosen) {
  if (chosen != Pooling::unspecified) return chosen;
  auto value = file.get_unsigned_or(architecture + ".pooling_type");
  if (!value) {
    throw GgufError(file.path() + ": it does not say how to pool (no " + architecture +
                    ".pooling_type): choose pooling mean, cls or last");
  }
  switch (*value) {
    case 1:
      return Pooling::mean;
    case 2:
      return Pooling::cls;
    case 3:
      return Pooling::last;
    default:
      throw GgufError(file.path() + ": " + architecture + ".pooling_type is " +
                      std::to_string(*value) +
                      ", which is not a pooling of a sentence vector (1 mean, 2 cls, 3 last); "
                      "choose pooling mean, cls or last");
  }
}

// bert and nomic-bert.
class Encoder final : public EmbeddingModel {
 public:
  Encoder(std::shared_ptr<const GgufFile> file, Pooling pooling) : file_(std::move(file)) {
    const GgufFile& gguf = *file_;
    architecture_ = gguf.get_string("general.architecture");
    nomic_ = architecture_ == "nomic-bert";
    auto key = [&](const std::string& name) { return architecture_ + "." + name; };
    config_.architecture = architecture_;
    config_.dim = static_cast<int64_t>(gguf.get_unsigned(key("embedding_length")));
    config_.layers = static_cast<int64_t>(gguf.get_unsigned(key("block_count")));
    config_.ffn = static_cast<int64_t>(gguf.get_unsigned(key("feed_forward_length")));
    config_.heads = static_cast<int64_t>(gguf.get_unsigned(key("attention.head_count")));
    config_.kv_heads = static_cast<int64_t>(
        gguf.get_unsigned_or(key("attention.head_count_kv")).value_or(config_.heads));
    config_.context = static_cast<int64_t>(gguf.get_unsigned(key("context_length")));
    if (config_.heads <= 0 || config_.dim % config_.heads != 0 || config_.kv_heads != config_.heads)
      throw GgufError(gguf.path() + ": heads must divide the embedding length, one key per head");
    config_.head_dim = config_.dim / config_.heads;
    epsilon_ = static_cast<float>(gguf.get_float(key("attention.layer_norm_epsilon")));
    if (gguf.get_bool_or(key("attention.causal")).value_or(false)) {
      throw GgufError(gguf.path() + ": " + key("attention.causal") +
                      " is true; chatflow runs bert-family files bidirectionally only");
    }
    config_.rope_dimensions = static_cast<int64_t>(
        gguf.get_unsigned_or(key("rope.dimension_count")).value_or(config_.head_dim));
    config_.rope.base =
        static_cast<float>(gguf.get_float_or(key("rope.freq_base")).value_or(10000.0));
    config_.rope_style = RopeStyle::halves;  // nomic-bert is NeoX-style in llama.cpp
    pooling_ = file_pooling(gguf, architecture_, pooling);
    tokenizer_ = std::make_unique<Tokenizer>(Vocabulary::from_gguf(gguf));
    load_weights();
  }

  const std::string& architecture() const override { return architecture_; }
  const Tokenizer& tokenizer() const override { return *tokenizer_; }
  int64_t dimensions() const override { return config_.dim; }
  int64_t context() const override { return config_.context; }
  int64_t vocabulary() const override { return token_embedding_.rows; }
  Pooling pooling() const override { return pooling_; }

  std::vector<float> hidden_states(std::span<const TokenId> tokens) const override {
    check_input(tokens);
    const int64_t n = static_cast<int64_t>(tokens.size()), dim = config_.dim;
    std::vector<float> hidden(static_cast<size_t>(n * dim)), position(static_cast<size_t>(dim));
    for (int64_t t = 0; t < n; ++t) {
      float* row = hidden.data() + t * dim;
      dequantize_row(token_embedding_, tokens[static_cast<size_t>(t)], row);
      if (!nomic_) dequantize_row(positions_, t, position.data());
      for (int64_t i = 0; i < dim; ++i) {
        // Token types are always 0 ("sentence A"), as in llama.cpp.
        row[i] += token_type_[static_cast<size_t>(i)];
        if (!nomic_) row[i] += position[static_cast<size_t>(i)];
      }
    }
    layer_norm(hidden.data(), n, dim, embedding_norm_, embedding_norm_bias_, epsilon_);
    std::vector<float> query(hidden.size()), key(hidden.size()), value(hidden.size()),
        attended(hidden.size()), projected(hidden.size()), fused, up, gate;
    for (const Layer& layer : layers_) {
      if (nomic_) {
        fused.resize(static_cast<size_t>(n * 3 * dim));
        multiply(layer.qkv, {}, hidden.data(), n, fused.data());
        for (int64_t t = 0; t < n; ++t) {
          const float* row = fused.data() + t * 3 * dim;
          std::copy(row, row + dim, query.data() + t * dim);
          std::copy(row + dim, row + 2 * dim, key.data() + t * dim);
          std::copy(row + 2 * dim, row + 3 * dim, value.data() + t * dim);
        }
        rotate(config_, query.data(), n, config_.heads);
        rotate(config_, key.data(), n, config_.heads);
      } else {
        multiply(layer.query, layer.query_bias, hidden.data(), n, query.data());
        multiply(layer.key, layer.key_bias, hidden.data(), n, key.data());
        multiply(layer.value, layer.value_bias, hidden.data(), n, value.data());
      }
      attend(query.data(), key.data(), value.data(), n, config_.heads, config_.heads,
             config_.head_dim, 1.0f / std::sqrt(static_cast<float>(config_.head_dim)), false,
             attended.data());
      multiply(layer.output, layer.output_bias, attended.data(), n, projected.data());
      for (size_t i = 0; i < projected.size(); ++i)
        projected[i] += hidden[i];
      layer_norm(projected.data(), n, dim, layer.attention_norm, layer.attention_norm_bias,
                 epsilon_);
      up.resize(static_cast<size_t>(n * config_.ffn));
      multiply(layer.up, layer.up_bias, projected.data(), n, up.data());
      if (nomic_) {
        gate.resize(up.size());
        multiply(layer.gate, {}, projected.data(), n, gate.data());
        for (size_t i = 0; i < up.size(); ++i)
          up[i] *= silu(gate[i]);
      } else {
        for (float& x : up)
          x = gelu(x);
      }
      multiply(layer.down, layer.down_bias, up.data(), n, hidden.data());
      for (size_t i = 0; i < hidden.size(); ++i)
        hidden[i] += projected[i];
      layer_norm(hidden.data(), n, dim, layer.output_norm, layer.output_norm_bias, epsilon_);
    }
    return hidden;
  }

 private:
  struct Layer {
    WeightMatrix query, key, value, qkv, output, up, gate, down;
    std::vector<float> query_bias, key_bias, value_bias, output_bias, up_bias, down_bias;
    std::vector<float> attention_norm, attention_norm_bias, output_norm, output_norm_bias;
  };

  void load_weights() {
    TensorReader read(*file_);
    const int64_t dim = config_.dim, ffn = config_.ffn;
    token_embedding_ = read.table("token_embd.weight", dim);
    const WeightMatrix token_types = read.table("token_types.weight", dim);
    if (token_types.rows < 1) throw GgufError(file_->path() + ": token_types.weight is empty");
    token_type_.resize(static_cast<size_t>(dim));
    dequantize_row(token_types, 0, token_type_.data());
    if (!nomic_) {
      positions_ = read.table("position_embd.weight", dim);
      config_.context = std::min(config_.context, positions_.rows);
    }
    embedding_norm_ = read.vector("token_embd_norm.weight", dim);
    embedding_norm_bias_ = read.vector("token_embd_norm.bias", dim);
    for (int64_t i = 0; i < config_.layers; ++i) {
      const std::string prefix = "blk." + std::to_string(i) + ".";
      Layer layer;
      if (nomic_) {
        layer.qkv = read.matrix(prefix + "attn_qkv.weight", dim, 3 * dim);
        layer.gate = read.matrix(prefix + "ffn_gate.weight", dim, ffn);
      } else {
        layer.query = read.matrix(prefix + "attn_q.weight", dim, dim);
        layer.query_bias = read.vector(prefix + "attn_q.bias", dim);
        layer.key = read.matrix(prefix + "attn_k.weight", dim, dim);
        layer.key_bias = read.vector(prefix + "attn_k.bias", dim);
        layer.value = read.matrix(prefix + "attn_v.weight", dim, dim);
        layer.value_bias = read.vector(prefix + "attn_v.bias", dim);
        layer.output_bias = read.vector(prefix + "attn_output.bias", dim);
        layer.up_bias = read.vector(prefix + "ffn_up.bias", ffn);
        layer.down_bias = read.vector(prefix + "ffn_down.bias", dim);
      }
      layer.output = read.matrix(prefix + "attn_output.weight", dim, dim);
      layer.attention_norm = read.vector(prefix + "attn_output_norm.weight", dim);
      layer.attention_norm_bias = read.vector(prefix + "attn_output_norm.bias", dim);
      layer.up = read.matrix(prefix + "ffn_up.weight", dim, ffn);
      layer.down = read.matrix(prefix + "ffn_down.weight", ffn, dim);
      layer.output_norm = read.vector(prefix + "layer_output_norm.weight", dim);
      layer.output_norm_bias = read.vector(prefix + "layer_output_norm.bias", dim);
      layers_.push_back(std::move(layer));
    }
    read.refuse_unused(architecture_);
  }

  std::shared_ptr<const GgufFile> file_;
  std::string architecture_;
  bool nomic_ = false;
  ModelConfig config_;
  float epsilon_ = 1e-12f;
  Pooling pooling_ = Pooling::mean;
  std::unique_ptr<Tokenizer> tokenizer_;
  WeightMatrix token_embedding_, positions_;
  std::vector<float> token_type_;  // row 0 of token_types.weight
  std::vector<float> embedding_norm_, embedding_norm_bias_;
  std::vector<Layer> layers_;
};

// A llama-family decoder's final (normed) hidden states.
class Decoder final : public EmbeddingModel {
 public:
  Decoder(std::shared_ptr<const Model> model, Pooling pooling) : model_(std::move(model)) {
    const ModelConfig& config = model_->config();
    const std::string& arch = config.architecture;
    if ((arch != "llama" && arch != "qwen2" && arch != "qwen3") || config.experts > 0 ||
        config.sliding_window > 0) {
      throw GgufError(model_->path() + ": a " + arch +
                      (config.experts > 0 ? " mixture of experts" : "") +
                      (config.sliding_window > 0 ? " with sliding-window attention" : "") +
                      " cannot be an embedding model here (supported: bert, nomic-bert, and "
                      "llama, qwen2, qwen3 without experts or sliding windows)");
    }
    pooling_ = file_pooling(model_->file(), arch, pooling);
  }

  const std::string& architecture() const override { return model_->config().architecture; }
  const Tokenizer& tokenizer() const override { return model_->tokenizer(); }
  int64_t dimensions() const override { return model_->config().dim; }
  int64_t context() const override { return model_->config().context; }
  int64_t vocabulary() const override { return model_->config().vocabulary; }
  Pooling pooling() const override { return pooling_; }

  std::vector<float> hidden_states(std::span<const TokenId> tokens) const override {
    check_input(tokens);
    const ModelConfig& config = model_->config();
    const int64_t n = static_cast<int64_t>(tokens.size()), dim = config.dim;
    const int64_t q_dim = config.heads * config.head_dim,
                  kv_dim = config.kv_heads * config.head_dim;
    std::vector<float> hidden(static_cast<size_t>(n * dim)), normed(hidden.size()),
        query(static_cast<size_t>(n * q_dim)), key(static_cast<size_t>(n * kv_dim)),
        value(key.size()), attended(query.size()), projected(hidden.size()),
        gate(static_cast<size_t>(n * config.ffn)), up(gate.size());
    for (int64_t t = 0; t < n; ++t) {
      dequantize_row(model_->token_embedding(), tokens[static_cast<size_t>(t)],
                     hidden.data() + t * dim);
    }
    for (const LayerWeights& weights : model_->layers()) {
      for (int64_t t = 0; t < n; ++t)
        rms_norm(hidden.data() + t * dim, weights.attention_norm.data(), normed.data() + t * dim,
                 dim, config.rms_epsilon);
      multiply(weights.query, weights.query_bias, normed.data(), n, query.data());
      multiply(weights.key, weights.key_bias, normed.data(), n, key.data());
      multiply(weights.value, weights.value_bias, normed.data(), n, value.data());
      if (config.query_key_norm) {
        for (int64_t h = 0; h < n * config.heads; ++h)
          rms_norm(query.data() + h * config.head_dim, weights.query_norm.data(),
                   query.data() + h * config.head_dim, config.head_dim, config.rms_epsilon);
        for (int64_t h = 0; h < n * config.kv_heads; ++h)
          rms_norm(key.data() + h * config.head_dim, weights.key_norm.data(),
                   key.data() + h * config.head_dim, config.head_dim, config.rms_epsilon);
      }
      rotate(config, query.data(), n, config.heads);
      rotate(config, key.data(), n, config.kv_heads);
      attend(query.data(), key.data(), value.data(), n, config.heads, config.kv_heads,
             config.head_dim, config.attention_scale, true, attended.data());
      multiply(weights.output, weights.output_bias, attended.data(), n, projected.data());
      for (size_t i = 0; i < hidden.size(); ++i)
        hidden[i] += projected[i];
      for (int64_t t = 0; t < n; ++t)
        rms_norm(hidden.data() + t * dim, weights.ffn_norm.data(), normed.data() + t * dim, dim,
                 config.rms_epsilon);
      multiply(weights.gate, {}, normed.data(), n, gate.data());
      multiply(weights.up, {}, normed.data(), n, up.data());
      for (size_t i = 0; i < up.size(); ++i)
        up[i] *= silu(gate[i]);
      multiply(weights.down, {}, up.data(), n, projected.data());
      for (size_t i = 0; i < hidden.size(); ++i)
        hidden[i] += projected[i];
    }
    for (int64_t t = 0; t < n; ++t)
      rms_norm(hidden.data() + t * dim, model_->output_norm().data(), hidden.data() + t * dim, dim,
               config.rms_epsilon);
    return hidden;
  }

 private:
  std::shared_ptr<const Model> model_;
  Pooling pooling_ = Pooling::mean;
};

}  // namespace

Pooling pooling_from_name(const std::string& name) {
  if (name.empty() || name == "auto") return Pooling::unspecified;
  if (name == "mean") return Pooling::mean;
  if (name == "cls") return Pooling::cls;
  if (name == "last") return Pooling::last;
  throw std::invalid_argument("pooling must be auto, mean, cls or last, got '" + name + "'");
}

const char* pooling_name(Pooling pooling) {
  switch (pooling) {
    case Pooling::mean:
      return "mean";
    case Pooling::cls:
      return "cls";
    case Pooling::last:
      return "last";
    case Pooling::unspecified:
      break;
  }
  return "auto";
}

void pool_rows(Pooling pooling, const float* rows, int64_t tokens, int64_t width, float* out) {
  if (tokens <= 0) throw std::length_error("nothing to pool: no rows");
  switch (pooling) {
    case Pooling::cls:
      std::copy(rows, rows + width, out);
      return;
    case Pooling::last:
      std::copy(rows + (tokens - 1) * width, rows + tokens * width, out);
      return;
    case Pooling::mean:
      for (int64_t i = 0; i < width; ++i) {
        double sum = 0;
        for (int64_t t = 0; t < tokens; ++t)
          sum += rows[t * width + i];
        out[i] = static_cast<float>(sum / static_cast<double>(tokens));
      }
      return;
    case Pooling::unspecified:
      break;
  }
  throw std::invalid_argument("pool_rows needs a pooling: mean, cls or last");
}

void normalize_l2(std::span<float> vector) {
  double sum = 0;
  for (float value : vector)
    sum += static_cast<double>(value) * value;
  const double norm = std::sqrt(sum);
  const float scale = norm > 0 ? static_cast<float>(1.0 / norm) : 0.0f;
  for (float& value : vector)
    value *= scale;
}

std::unique_ptr<EmbeddingModel> EmbeddingModel::load(const std::string& path, Pooling pooling) {
  auto file = GgufFile::open(path);
  const std::string architecture = file->get_string("general.architecture");
  if (architecture == "bert" || architecture == "nomic-bert")
    return std::make_unique<Encoder>(std::move(file), pooling);
  return std::make_unique<Decoder>(Model::from_file(std::move(file)), pooling);
}

void EmbeddingModel::check_input(std::span<const TokenId> tokens) const {
  if (tokens.empty()) throw std::length_error("an input has no tokens");
  if (static_cast<int64_t>(tokens.size()) > context()) {
    throw std::length_error("an input of " + std::to_string(tokens.size()) +
                            " tokens is longer than the model's context of " +
                            std::to_string(context()));
  }
  for (TokenId id : tokens) {
    if (id < 0 || id >= vocabulary())
      throw std::out_of_range("token id " + std::to_string(id) + " is outside the vocabulary of " +
                              std::to_string(vocabulary()));
  }
}

std::vector<float> EmbeddingModel::embed(std::span<const TokenId> tokens) const {
  std::vector<float> rows = hidden_states(tokens);
  std::vector<float> vector(static_cast<size_t>(dimensions()));
  pool_rows(pooling(), rows.data(), static_cast<int64_t>(tokens.size()), dimensions(),
            vector.data());
  normalize_l2(vector);
  return vector;
}

std::vector<TokenId> EmbeddingModel::tokenize(std::string_view text) const {
  return tokenizer().encode(text, true, true);
}

}  // namespace chatflow::engine
