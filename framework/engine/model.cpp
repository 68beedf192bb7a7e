#include "framework/engine/model.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <set>

#include "kernels/quantize.h"

namespace chatflow::engine {
namespace {

class WeightLoader {
 public:
  WeightLoader(const GgufFile& file, uint64_t& bytes) : file_(file), bytes_(bytes) {}

  const GgufTensorInfo& tensor(const std::string& name) {
    const GgufTensorInfo* tensor = file_.find_tensor(name);
    if (tensor == nullptr) throw GgufError(file_.path() + ": tensor '" + name + "' is missing");
    used_.insert(name);
    if (!kernels::computable(tensor->type)) {
      throw GgufError(file_.path() + ": tensor '" + name + "' has type " +
                      std::string(kernels::to_string(tensor->type)) + " (" +
                      std::to_string(static_cast<uint32_t>(tensor->type)) +
                      "), which chatflow cannot compute with (supported: " +
                      kernels::computable_type_names() + ")");
    }
    return *tensor;
  }

  void expect_shape(const GgufTensorInfo& tensor, std::vector<int64_t> shape,
                    const std::string& why) {
    if (tensor.shape != shape) {
      std::string expected = "[";
      for (size_t i = 0; i < shape.size(); ++i)
        expected += (i ? ", " : "") + std::to_string(shape[i]);
      throw GgufError(file_.path() + ": tensor '" + tensor.name + "' has shape " +
                      tensor.shape_text() + ", expected " + expected + "] (" + why + ")");
    }
  }

  // GGUF shapes list the contiguous dimension first: [columns, rows].
  WeightMatrix matrix(const std::string& name, int64_t columns, int64_t rows,
                      const std::string& why) {
    const GgufTensorInfo& info = tensor(name);
    expect_shape(info, {columns, rows}, why);
    bytes_ += info.bytes;
    return {info.type, info.data, rows, columns, kernels::row_bytes(info.type, columns)};
  }

  // A [columns, rows, experts] tensor as one matrix per expert.
  std::vector<WeightMatrix> experts(const std::string& name, int64_t columns, int64_t rows,
                                    int64_t count, const std::string& why) {
    const GgufTensorInfo& info = tensor(name);
    expect_shape(info, {columns, rows, count}, why + ", per expert");
    bytes_ += info.bytes;
    WeightMatrix all{info.type, info.data, rows * count, columns,
                     kernels::row_bytes(info.type, columns)};
    std::vector<WeightMatrix> each;
    for (int64_t e = 0; e < count; ++e)
      each.push_back(rows_of(all, e * rows, rows));
    return each;
  }

  // Consecutive rows of `fused` as a matrix of its own (phi3's qkv and gate+up matrices).
  static WeightMatrix rows_of(const WeightMatrix& fused, int64_t first, int64_t count) {
    WeightMatrix part = fused;
    part.data = fused.data + static_cast<size_t>(first) * fused.row_bytes;
    part.rows = count;
    return part;
  }

  // Tensors read elsewhere (the rope factors, by ModelConfig).
  void mark_used(const std::string& name) { used_.insert(name); }

  // A tensor the architecture does not read would be ignored: the file is something this
  // build does not compute correctly, so it is refused by name instead.
  void refuse_unused(const std::string& architecture) const {
    for (const auto& tensor : file_.tensors()) {
      if (used_.count(tensor.name) == 0) {
        throw GgufError(file_.path() + ": tensor '" + tensor.name + "' is not part of the " +
                        architecture +
                        " architecture as chatflow computes it; refusing the file rather than "
                        "ignoring the tensor");
      }
    }
  }

  std::vector<float> vector(const std::string& name, int64_t length, const std::string& why) {
    const GgufTensorInfo& info = tensor(name);
    expect_shape(info, {length}, why);
    bytes_ += info.bytes;
    WeightMatrix as_row{info.type, info.data, 1, length, kernels::row_bytes(info.type, length)};
    std::vector<float> values(static_cast<size_t>(length));
    dequantize_row(as_row, 0, values.data());
    return values;
  }

 private:
  const GgufFile& file_;
  uint64_t& bytes_;
  std::set<std::string> used_;
};

}  // namespace

std::shared_ptr<const Model> Model::load(const std::string& path) {
  return from_file(GgufFile::open(path));
}

std::shared_ptr<const Model> Model::from_file(std::shared_ptr<const GgufFile> file) {
  auto model = std::shared_ptr<Model>(new Model());
  model->file_ = std::move(file);
  const GgufFile& gguf = *model->file_;
  model->config_ = ModelConfig::from_gguf(gguf);
  model->tokenizer_ = std::make_unique<Tokenizer>(Vocabulary::from_gguf(gguf));
  ModelConfig& config = model->config_;
  WeightLoader loader(gguf, model->weight_bytes_);
  // The embedding table decides the logits' width; some models pad it beyond the tokenizer's size.
  const GgufTensorInfo& embedding = loader.tensor("token_embd.weight");
  int64_t tokenizer_size = static_cast<int64_t>(model->tokenizer_->vocabulary().size());
  if (embedding.shape.size() != 2 || embedding.shape[1] < tokenizer_size) {
    throw GgufError(gguf.path() + ": tensor 'token_embd.weight' has shape " +
                    embedding.shape_text() + ", expected [" + std::to_string(config.dim) +
                    ", at least " + std::to_string(tokenizer_size) +
                    "] (embedding_length x the tokenizer's " + std::to_string(tokenizer_size) +
                    " tokens)");
  }
  config.vocabulary = embedding.shape[1];

  const int64_t dim = config.dim;
  const int64_t q_dim = config.heads * config.head_dim;
  const int64_t kv_dim = config.kv_heads * config.head_dim;
  const std::string dims = "embedding_length " + std::to_string(dim);
  model->token_embedding_ =
      loader.matrix("token_embd.weight", dim, config.vocabulary,
                    dims + " x vocabulary " + std::to_string(config.vocabulary));
  model->output_norm_ = loader.vector("output_norm.weight", dim, dims);
  if (gguf.find_tensor("output.weight")) {
    model->output_ = loader.matrix("output.weight", dim, config.vocabulary, dims + " x vocabulary");
  } else {
    model->output_ = model->token_embedding_;  // tied embeddings
  }
  for (int64_t layer = 0; layer < config.layers; ++layer) {
    std::string prefix = "blk." + std::to_string(layer) + ".";
    LayerWeights weights;
    std::string heads =
        std::to_string(config.heads) + " heads of " + std::to_string(config.head_dim);
    std::string kv_heads =
        std::to_string(config.kv_heads) + " key/value heads of " + std::to_string(config.head_dim);
    const std::string ffn = "feed_forward_length " + std::to_string(config.ffn);
    if (config.fused_projections) {
      WeightMatrix qkv = loader.matrix(prefix + "attn_qkv.weight", dim, q_dim + 2 * kv_dim,
                                       dims + ", queries, keys and values of " + heads);
      weights.query = WeightLoader::rows_of(qkv, 0, q_dim);
      weights.key = WeightLoader::rows_of(qkv, q_dim, kv_dim);
      weights.value = WeightLoader::rows_of(qkv, q_dim + kv_dim, kv_dim);
    } else {
      weights.query = loader.matrix(prefix + "attn_q.weight", dim, q_dim, dims + ", " + heads);
      weights.key = loader.matrix(prefix + "attn_k.weight", dim, kv_dim, dims + ", " + kv_heads);
      weights.value = loader.matrix(prefix + "attn_v.weight", dim, kv_dim, dims + ", " + kv_heads);
    }
    weights.output = loader.matrix(prefix + "attn_output.weight", q_dim, dim, heads + ", " + dims);
    if (gguf.find_tensor(prefix + "attn_output.bias"))
      weights.output_bias = loader.vector(prefix + "attn_output.bias", dim, dims);
    if (config.experts > 0) {
      const std::string experts = std::to_string(config.experts) + " experts";
      const std::string expert_ffn =
          "expert feed_forward_length " + std::to_string(config.expert_ffn);
      weights.router =
          loader.matrix(prefix + "ffn_gate_inp.weight", dim, config.experts, dims + ", " + experts);
      weights.expert_gate = loader.experts(prefix + "ffn_gate_exps.weight", dim, config.expert_ffn,
                                           config.experts, dims + ", " + expert_ffn);
      weights.expert_up = loader.experts(prefix + "ffn_up_exps.weight", dim, config.expert_ffn,
                                         config.experts, dims + ", " + expert_ffn);
      weights.expert_down = loader.experts(prefix + "ffn_down_exps.weight", config.expert_ffn, dim,
                                           config.experts, expert_ffn + ", " + dims);
      if (config.shared_expert_ffn > 0) {
        const std::string shared =
            "shared expert feed_forward_length " + std::to_string(config.shared_expert_ffn);
        weights.gate = loader.matrix(prefix + "ffn_gate_shexp.weight", dim,
                                     config.shared_expert_ffn, dims + ", " + shared);
        weights.up = loader.matrix(prefix + "ffn_up_shexp.weight", dim, config.shared_expert_ffn,
                                   dims + ", " + shared);
        weights.down = loader.matrix(prefix + "ffn_down_shexp.weight", config.shared_expert_ffn,
                                     dim, shared + ", " + dims);
        weights.shared_expert_gate = loader.vector(prefix + "ffn_gate_inp_shexp.weight", dim, dims);
      }
    } else if (config.fused_projections) {
      WeightMatrix gate_up = loader.matrix(prefix + "ffn_up.weight", dim, 2 * config.ffn,
                                           dims + ", gate and up of " + ffn);
      weights.gate = WeightLoader::rows_of(gate_up, 0, config.ffn);
      weights.up = WeightLoader::rows_of(gate_up, config.ffn, config.ffn);
      weights.down = loader.matrix(prefix + "ffn_down.weight", config.ffn, dim,
                                   "feed_forward_length, " + dims);
    } else {
      weights.gate = loader.matrix(prefix + "ffn_gate.weight", dim, config.ffn, dims + ", " + ffn);
      weights.up = loader.matrix(prefix + "ffn_up.weight", dim, config.ffn, dims + ", " + ffn);
      weights.down = loader.matrix(prefix + "ffn_down.weight", config.ffn, dim,
                                   "feed_forward_length, " + dims);
    }
    weights.attention_norm = loader.vector(prefix + "attn_norm.weight", dim, dims);
    weights.ffn_norm = loader.vector(prefix + "ffn_norm.weight", dim, dims);
    if (config.attention_bias) {
      weights.query_bias = loader.vector(prefix + "attn_q.bias", q_dim, heads);
      weights.key_bias = loader.vector(prefix + "attn_k.bias", kv_dim, kv_heads);
      weights.value_bias = loader.vector(prefix + "attn_v.bias", kv_dim, kv_heads);
    }
    const std::string head = "the head size " + std::to_string(config.head_dim);
    if (config.query_key_norm) {
      weights.query_norm = loader.vector(prefix + "attn_q_norm.weight", config.head_dim, head);
      weights.key_norm = loader.vector(prefix + "attn_k_norm.weight", config.head_dim, head);
    }
    if (config.post_norms) {
      weights.attention_post_norm = loader.vector(prefix + "post_attention_norm.weight", dim, dims);
      weights.ffn_post_norm = loader.vector(prefix + "post_ffw_norm.weight", dim, dims);
    }
    model->layers_.push_back(std::move(weights));
  }
  for (const char* name :
       {"rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight"}) {
    loader.mark_used(name);
  }
  loader.refuse_unused(config.architecture);
  return model;
}

void dequantize_row(const WeightMatrix& matrix, int64_t row, float* out) {
  kernels::dequantize_row(matrix.type, matrix.data + static_cast<size_t>(row) * matrix.row_bytes,
                          matrix.columns, out);
}

}  // namespace chatflow::engine
