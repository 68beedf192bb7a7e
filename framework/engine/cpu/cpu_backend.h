// The CPU backend: today's transformer (transformer.h) and the CPU kernel table behind the
// backend seam (backend.h). Weights are packed once into its own arena (cpu_weights.h), the KV
// pool is host memory (cpu_kv_pool.h), a step runs on a oneTBB arena of a fixed number of
// threads, and a chunk that wants a token is drawn here, from its logits row, with
// sample_token (sampler.h): the same draw the scheduler made before the seam existed.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "framework/engine/backend.h"
#include "framework/engine/compute_threads.h"
#include "framework/engine/cpu/cpu_kv_pool.h"
#include "framework/engine/cpu/cpu_weights.h"
#include "framework/engine/cpu/transformer.h"

namespace chatflow::engine {

class CpuBackend final : public Backend {
 public:
  CpuBackend(std::shared_ptr<const Model> model, const BackendOptions& options);

  BackendInfo info() const override;
  const Model& model() const override { return *model_; }
  void allocate_kv_pool(const KvPoolShape& shape) override;
  void forward(std::span<const StepChunk> chunks, StepOutput& out) override;
  size_t kv_block_bytes() const override;
  void read_kv_block(BlockId block, std::span<std::byte> out) const override;
  void write_kv_block(BlockId block, std::span<const std::byte> bytes) override;

 private:
  std::shared_ptr<const Model> model_;
  const kernels::CpuKernelTable& kernels_;
  CpuWeights weights_;
  ComputeThreads threads_;
  std::string device_;
  Transformer transformer_;
  std::unique_ptr<CpuKvPool> pool_;
  SamplingScratch sampling_;
  std::vector<float> token_logits_;  // rows of chunks that want a token, when logits come too
  uint64_t workspace_bytes_ = 0;
};

// "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz (avx512_vnni, 2 threads)": the processor's
// name as /proc/cpuinfo gives it, the kernel table's instruction sets, the threads.
std::string cpu_device_description(const kernels::CpuKernelTable& kernels, int threads);

}  // namespace chatflow::engine
