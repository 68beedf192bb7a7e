// The CPU backend's forward pass of a llama-family decoder over a batch that mixes sequences:
// each chunk is some new tokens of one sequence (a whole prompt, a piece of one, or one
// generated token). Projections run as one matrix-matrix product over all tokens of the step
// (weights read once), attention reads each sequence's keys and values from the paged KV pool.
// Every computation goes through the CPU kernel table (kernels/cpu/cpu_kernel_table.h); rope
// angles, mixture-of-experts routing, soft-caps and activation quantisation happen here, on the
// host, between kernel calls. Only the CPU backend (cpu_backend.h) uses it.
#pragma once

#include <initializer_list>
#include <memory>
#include <span>
#include <vector>

#include "framework/engine/backend.h"
#include "framework/engine/compute_threads.h"
#include "framework/engine/cpu/cpu_kv_pool.h"
#include "framework/engine/cpu/cpu_weights.h"
#include "framework/engine/model.h"
#include "kernels/cpu/cpu_kernel_table.h"
#include "kernels/cpu/cpu_kernels.h"

namespace chatflow::engine {

class Transformer {
 public:
  // `weights` (the model's, placed for the CPU) must outlive the transformer.
  Transformer(std::shared_ptr<const Model> model, const CpuWeights& weights,
              const kernels::CpuKernelTable& kernels = kernels::cpu_kernels());
  ~Transformer();

  const Model& model() const { return *model_; }

  // Vocabulary-sized rows one step writes for `chunks`: one per chunk that wants logits or a
  // token, one per token of a chunk that wants every_logits.
  static int64_t logit_rows(std::span<const StepChunk> chunks);

  // Runs one step: writes each chunk's keys and values into `pool`, and into `logits`
  // (logit_rows(chunks) rows) first the rows of the chunks that want logits or every_logits,
  // in chunk order, then those of the chunks that want a token, in chunk order. Checks every
  // chunk before computing anything: a token id outside the vocabulary throws
  // std::out_of_range, a chunk past the context std::length_error, a block table that does not
  // cover its chunk std::logic_error.
  void forward(std::span<const StepChunk> chunks, CpuKvPool& pool, ComputeThreads& threads,
               std::span<float> logits);

  // Bytes its buffers hold now (they grow to the largest step).
  uint64_t workspace_bytes() const;

 private:
  struct Workspace;
  struct Step;
  // One matrix product of a step: `weights` times the step's input rows into `y`.
  struct Product {
    const WeightMatrix& weights;
    float* y;
  };

  int64_t layout_batch(std::span<const StepChunk> chunks, const CpuKvPool& pool,
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
  const CpuWeights& weights_;
  const kernels::CpuKernelTable& kernels_;
  std::unique_ptr<Workspace> workspace_;
};

}  // namespace chatflow::engine
