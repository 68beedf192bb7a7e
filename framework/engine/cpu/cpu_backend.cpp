#include "framework/engine/cpu/cpu_backend.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>

#include "framework/engine/step_math.h"

namespace chatflow::engine {

std::string cpu_device_description(const kernels::CpuKernelTable& kernels, int threads) {
  std::string name;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; name.empty() && std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    size_t colon = line.find(':');
    if (colon != std::string::npos) name = line.substr(line.find_first_not_of(" \t", colon + 1));
  }
  if (name.empty()) name = "CPU";
  std::string kernel_sets(kernels.instruction_set);
  if (kernels.quantized_instruction_set != kernels.instruction_set)
    kernel_sets += ", quantised " + std::string(kernels.quantized_instruction_set);
  return name + " (" + kernel_sets + ", " + std::to_string(threads) +
         (threads == 1 ? " thread)" : " threads)");
}

CpuBackend::CpuBackend(std::shared_ptr<const Model> model, const BackendOptions& options)
    : model_(std::move(model)),
      kernels_(kernels::cpu_kernels()),
      weights_(*model_),
      threads_(std::max(1, options.threads)),
      device_(cpu_device_description(kernels_, threads_.threads())),
      transformer_(model_, weights_, kernels_) {}

BackendInfo CpuBackend::info() const {
  BackendInfo info;
  info.name = "cpu";
  info.device = device_;
  info.memory.weight_bytes = weights_.bytes();
  if (pool_) {
    info.memory.kv_pool_bytes =
        static_cast<uint64_t>(pool_->block_bytes()) * static_cast<uint64_t>(pool_->total_blocks());
  }
  info.memory.workspace_bytes = workspace_bytes_;
  info.samples_on_device = true;  // drawn where the logits are: no row is copied for a token
  info.kv_types = {kernels::KvType::f16, kernels::KvType::f32};
  // q8_0 keeps each head's row in blocks of 32 values: only heads of whole blocks.
  if (model_->config().head_dim % kernels::kv_block_values(kernels::KvType::q8_0) == 0)
    info.kv_types.push_back(kernels::KvType::q8_0);
  return info;
}

void CpuBackend::allocate_kv_pool(const KvPoolShape& shape) {
  if (pool_) throw std::logic_error("the KV pool is allocated once");
  pool_ = std::make_unique<CpuKvPool>(model_->config(), shape);
}

size_t CpuBackend::kv_block_bytes() const {
  if (!pool_) throw std::logic_error("no KV pool yet");
  return pool_->block_bytes();
}

// A block's elements are contiguous in the pool (cpu_kv_pool.h): one copy each way.
static std::byte* block_address(const CpuKvPool& pool, BlockId block, size_t bytes) {
  if (block < 0 || block >= pool.total_blocks() || bytes != pool.block_bytes())
    throw std::out_of_range("KV block " + std::to_string(block) + " of " + std::to_string(bytes) +
                            " bytes is not in the pool");
  return static_cast<std::byte*>(const_cast<void*>(pool.pool())) +
         static_cast<size_t>(block) * pool.block_bytes();
}

void CpuBackend::read_kv_block(BlockId block, std::span<std::byte> out) const {
  if (!pool_) throw std::logic_error("no KV pool yet");
  std::memcpy(out.data(), block_address(*pool_, block, out.size()), out.size());
}

void CpuBackend::write_kv_block(BlockId block, std::span<const std::byte> bytes) {
  if (!pool_) throw std::logic_error("no KV pool yet");
  std::memcpy(block_address(*pool_, block, bytes.size()), bytes.data(), bytes.size());
}

void CpuBackend::forward(std::span<const StepChunk> chunks, StepOutput& out) {
  if (!pool_) throw std::logic_error("a step before the KV pool was allocated");
  const auto vocabulary = static_cast<size_t>(model_->config().vocabulary);
  const auto rows = static_cast<size_t>(Transformer::logit_rows(chunks));
  size_t token_rows = 0;
  for (const auto& chunk : chunks)
    token_rows += chunk.want == StepChunk::Want::token && !chunk.tokens.empty();
  out.tokens.clear();
  const size_t logits_rows = rows - token_rows;
  // Without tokens to draw the rows go straight to the caller's buffer; with them, to this
  // backend's, the tokens' rows after the others (Transformer::forward's order).
  std::vector<float>& destination = token_rows == 0 ? out.logits : token_logits_;
  if (destination.size() < rows * vocabulary) destination.resize(rows * vocabulary);
  transformer_.forward(chunks, *pool_, threads_, destination);
  workspace_bytes_ = std::max(workspace_bytes_, transformer_.workspace_bytes());
  if (token_rows == 0) {
    out.logits.resize(rows * vocabulary);
    return;
  }
  out.logits.assign(token_logits_.begin(),
                    token_logits_.begin() + static_cast<std::ptrdiff_t>(logits_rows * vocabulary));
  draw_chunk_tokens(chunks, token_logits_.data() + logits_rows * vocabulary,
                    static_cast<int64_t>(vocabulary), sampling_, out.tokens);
}

}  // namespace chatflow::engine
