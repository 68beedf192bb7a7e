// The forward pass of a llama-family decoder over a batch that mixes sequences: each chunk is
// some new tokens of one sequence (a whole prompt, a piece of one, or one generated token).
// Projections run as one matrix-matrix product over all tokens of the step (weights read once),
// attention reads each sequence's keys and values from the paged KV cache. Every computation
// goes through the kernel table (kernels/kernel_table.h), the engine's device interface.
#pragma once

#include <initializer_list>
#include <memory>
#include <span>
#include <vector>

#include "framework/engine/compute_threads.h"
#include "framework/engine/kv_cache.h"
#include "framework/engine/model.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/kernel_table.h"

namespace chatflow::engine {

struct SequenceChunk {
  KvSequence* sequence;             // its KV positions must already be reserved
  std::span<const TokenId> tokens;  // appended at positions sequence->length, ...
  bool logits = true;               // produce logits for the chunk's last token
  bool every_token = false;         // ... for each of its tokens instead (perplexity)
};

class Transformer {
 public:
  explicit Transformer(std::shared_ptr<const Model> model,
                       const kernels::KernelTable& kernels = kernels::cpu_kernels());
  ~Transformer();

  const Model& model() const { return *model_; }

  // Runs one step. Writes each chunk's keys and values into the cache and advances its
  // sequence's length; `logits` receives vocabulary-sized rows for the chunks that asked for
  // them (one per token for every_token chunks), in chunk order. Token ids outside the vocabulary
  // throw std::out_of_range.
  void forward(std::span<const SequenceChunk> chunks, KvCache& cache, ComputeThreads& threads,
               std::span<float> logits);

 private:
  struct Workspace;
  struct Step;
  // One matrix product of a step: `weights` times the step's input rows into `y`.
  struct Product {
    const WeightMatrix& weights;
    float* y;
  };

  int64_t layout_batch(std::span<const SequenceChunk> chunks, const KvCache& cache,
                       std::span<float> logits);
  void compute_rope_angles(int64_t tokens);
  void multiply(Step& step, std::initializer_list<Product> products, const float* x, int64_t count);
  void quantize_inputs(Step& step, std::initializer_list<Product> products, const float* x,
                       int64_t count);
  void multiply_quantized(Step& step, const Product& product, int64_t count);
  void store_keys_and_values(Step& step, int64_t layer);
  void attend(Step& step, int64_t layer);
  void feed_forward(Step& step, const WeightMatrix& gate, const WeightMatrix& up,
                    const WeightMatrix& down, const float* x, int64_t count, float* out);
  void mixture_of_experts(Step& step, const LayerWeights& weights);
  void run_layer(Step& step, int64_t layer);
  void final_logits(Step& step, std::span<float> logits);

  std::shared_ptr<const Model> model_;
  const kernels::KernelTable& kernels_;
  std::unique_ptr<Workspace> workspace_;
};

}  // namespace chatflow::engine
