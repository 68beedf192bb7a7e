// A loaded model: the GGUF file (memory-mapped: quantised weights stay quantised in memory),
// its configuration, tokenizer, and views of every weight with its shape checked. It belongs to
// no device: a backend (backend.h) places the weights where it computes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "framework/engine/gguf_file.h"
#include "framework/engine/model_config.h"
#include "framework/engine/tokenizer.h"
#include "kernels/tensor_type.h"

namespace chatflow::engine {

// A weight matrix as the kernels see it: `rows` outputs, each a row of `columns` inputs.
struct WeightMatrix {
  kernels::TensorType type = kernels::TensorType::f32;
  const uint8_t* data = nullptr;
  int64_t rows = 0;
  int64_t columns = 0;
  size_t row_bytes = 0;
  // The same weights packed for matrix products over many tokens, where a backend's copy of
  // the views has them (the CPU backend's, cpu/cpu_weights.h, for float types); always null in
  // the Model, whose views are of the file as stored.
  const uint8_t* panels = nullptr;
};

struct LayerWeights {
  WeightMatrix query, key, value, output;
  WeightMatrix gate, up, down;
  std::vector<float> attention_norm;
  std::vector<float> ffn_norm;
  std::vector<float> query_bias, key_bias, value_bias;    // qwen2, and llama files with them
  std::vector<float> output_bias;                         // llama files that have it
  std::vector<float> query_norm, key_norm;                // per head: qwen3, gemma3
  std::vector<float> attention_post_norm, ffn_post_norm;  // gemma2, gemma3
  // Mixture of experts: the router (one row per expert), each expert's matrices, and qwen2moe's
  // shared expert (gate, up, down above) with the row of its sigmoid gate.
  WeightMatrix router;
  std::vector<WeightMatrix> expert_gate, expert_up, expert_down;
  std::vector<float> shared_expert_gate;
};

class Model {
 public:
  // Throws GgufError for anything wrong with the file, naming the tensor or key.
  static std::shared_ptr<const Model> load(const std::string& path);
  static std::shared_ptr<const Model> from_file(std::shared_ptr<const GgufFile> file);

  const ModelConfig& config() const { return config_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const GgufFile& file() const { return *file_; }
  const std::string& path() const { return file_->path(); }

  const WeightMatrix& token_embedding() const { return token_embedding_; }
  const WeightMatrix& output() const { return output_; }  // token_embedding when tied
  const std::vector<float>& output_norm() const { return output_norm_; }
  const std::vector<LayerWeights>& layers() const { return layers_; }
  // Bytes of all weights as stored (what one token's forward pass reads).
  uint64_t weight_bytes() const { return weight_bytes_; }

 private:
  Model() = default;
  std::shared_ptr<const GgufFile> file_;
  ModelConfig config_;
  std::unique_ptr<Tokenizer> tokenizer_;
  WeightMatrix token_embedding_;
  WeightMatrix output_;
  std::vector<float> output_norm_;
  std::vector<LayerWeights> layers_;
  uint64_t weight_bytes_ = 0;
};

// Writes row `row` of `matrix` as floats into `out` (columns values).
void dequantize_row(const WeightMatrix& matrix, int64_t row, float* out);

}  // namespace chatflow::engine
