// The engine's backend seam: where a model computes. The scheduler (scheduler.h) stays on the
// host and knows no device: it keeps the queues, continuous batching, the block tables
// (KvBlockAllocator, kv_block_allocator.h), the prefix cache, each sequence's sampling state and
// its constraint's masks. A Backend owns everything that lives where it computes: the weights
// (placed once, in their file's types), the KV pool's memory, its workspace and its threads or
// streams. The two meet once per step: the scheduler hands over every chunk of the step with its
// block table and what it wants back, and the backend runs all layers and returns logits rows or
// sampled tokens.
//
//   Scheduler ──forward(chunks)──► Backend ─┬─ cpu  (framework/engine/cpu/: the CPU kernel table)
//   (host)    ◄─logits / tokens───          └─ cuda (issue 35)
//
// Everything crosses as data, so a device can keep it all on its side: token ids, positions and
// block tables in; a token's sampling parameters, its random number, the penalty history and a
// constraint's allowed-token mask (a bitset) in; one sampled token (with the log-probabilities
// asked for) out, with no vocabulary-sized row copied back unless a chunk asks for logits.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "framework/engine/kv_block_allocator.h"
#include "framework/engine/model.h"
#include "framework/engine/sampler.h"
#include "kernels/kv_type.h"

namespace chatflow::engine {

// Bytes a backend holds, by what they are for.
struct BackendMemory {
  uint64_t weight_bytes = 0;     // the weights where it computes (packed copies, uploads)
  uint64_t kv_pool_bytes = 0;    // the KV pool (on the CPU address space, committed as used)
  uint64_t workspace_bytes = 0;  // activations and scratch, as large as the largest step so far
};

struct BackendInfo {
  std::string name;    // "cpu", "cuda"
  std::string device;  // "AMD EPYC 7R13 Processor (avx2, 2 threads)", "NVIDIA H100 80GB HBM3"
  BackendMemory memory;
  // Whether a chunk that wants a token is drawn where the logits are (no row comes back).
  bool samples_on_device = false;
  std::vector<kernels::KvType> kv_types;  // what its KV pool can store
};

// The KV pool: `blocks` blocks of `block_tokens` positions, each holding every layer's keys and
// values of those positions, stored as `type`.
struct KvPoolShape {
  int64_t blocks = 0;
  int64_t block_tokens = 16;
  kernels::KvType type = kernels::KvType::f16;
};

// Bytes of one KV block of `model` (every layer's keys and values), whatever the backend.
inline uint64_t kv_block_bytes(const ModelConfig& model, int64_t block_tokens,
                               kernels::KvType type) {
  return static_cast<uint64_t>(model.layers * 2 * model.kv_heads * block_tokens) *
         kernels::kv_row_bytes(type, model.head_dim);
}

// How to draw the token of a chunk that wants one. All of it is data the backend may copy to
// its device: the draw is Sampler's (sampler.h) exactly, from these values.
struct TokenDraw {
  const SamplingParams* params = nullptr;
  // The draw's random number in [0, 1), taken from the sequence's own stream by the scheduler
  // (Sampler::next_uniform); unused when greedy. Seeded sequences draw the same tokens on every
  // backend that samples the same distribution.
  float uniform = 0;
  std::span<const TokenId> history;  // what the penalties look at (the tokens generated so far)
  // The tokens a constraint allows: bit (id % 64) of word (id / 64) set when `id` may come next
  // (ceil(vocabulary / 64) words); empty when any token may. Log-probabilities are reported
  // under the constrained distribution (a forbidden token's logit is -infinity).
  std::span<const uint64_t> allowed;
};

// One sequence's part of a step: `tokens` at positions [start, start + tokens.size()), whose
// keys and values go to (and whose attention reads from) the blocks of `block_table`, which the
// scheduler reserved to cover every position up to the end.
struct StepChunk {
  enum class Want {
    nothing,       // only the keys and values (a piece of a prompt)
    logits,        // the logits row of the chunk's last token
    every_logits,  // a logits row for each of its tokens (perplexity)
    token,         // the next token, drawn as `draw` says
  };
  std::span<const TokenId> tokens;
  int64_t start = 0;
  std::span<const BlockId> block_table;
  Want want = Want::nothing;
  TokenDraw draw;  // for Want::token
};

// What a step gives back, in chunk order. Keep one across steps: its buffers are reused.
struct StepOutput {
  // Vocabulary-sized rows: one per chunk that wanted logits, one per token of each chunk that
  // wanted every_logits.
  std::vector<float> logits;
  // One per chunk that wanted a token.
  std::vector<SampledToken> tokens;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual BackendInfo info() const = 0;
  virtual const Model& model() const = 0;

  // Sets up the KV pool's memory, once, before the first step. Throws std::invalid_argument for
  // a shape it cannot hold (a KV type it does not store, block_tokens not a multiple of 16, no
  // blocks) and std::bad_alloc when the memory is not there.
  virtual void allocate_kv_pool(const KvPoolShape& shape) = 0;

  // Runs one step over `chunks`: every layer for every token, the keys and values written to
  // the chunks' blocks, then what each chunk wants into `out` (cleared first). Chunks may share
  // blocks (a common prefix) for positions they only read. A chunk's results never depend on
  // the other chunks of the step. Throws std::out_of_range for a token id outside the
  // vocabulary, std::length_error past the model's context, std::logic_error for a block table
  // that does not cover the chunk or a step before allocate_kv_pool; nothing of `out` is to be
  // trusted then, and the chunks' new positions hold no keys or values.
  virtual void forward(std::span<const StepChunk> chunks, StepOutput& out) = 0;

  // One KV block's bytes (every layer's keys and values for its positions) as this backend stores
  // them: the prefix cache is saved across restarts through these (prefix_cache_file.h), and read
  // back only by the same backend, model and KV type. Throw std::logic_error before
  // allocate_kv_pool and std::out_of_range for a block outside the pool or a wrong size.
  virtual size_t kv_block_bytes() const = 0;
  virtual void read_kv_block(BlockId block, std::span<std::byte> out) const = 0;
  virtual void write_kv_block(BlockId block, std::span<const std::byte> bytes) = 0;
};

// Why a backend cannot be made: not in this build, or no device for it. The message says what
// is missing and how to get it.
class BackendUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct BackendOptions {
  int threads = 1;  // the CPU backend's compute threads (at least 1)
  // The most tokens one step holds (the scheduler's max_batched_tokens): a device backend plans
  // its workspace for it before loading.
  int64_t max_step_tokens = 2048;
};

// The backends this build has, best first ("cpu" always; "cuda" in a build with its backend).
std::vector<std::string> backend_names();

// Whether this build has CUDA (-DCHATFLOW_CUDA found a CUDA compiler: chatflow_cuda is built).
bool built_with_cuda();

// What BackendUnavailable says for backend `name` in a build with CUDA or without ("" for one
// every build has): how to get it.
std::string missing_backend_message(std::string_view name, bool built_with_cuda);

// Why make_backend(name, ...) would fail here, found before any model is loaded (a backend not in
// this build, no device for it, a name no build knows), or nullopt when it can be made.
std::optional<std::string> backend_unavailable(std::string_view name);

// The memory read rate in GB/s of the device backend `name` ("cuda", or "auto" where that is
// the GPU) computes on, measured now (a few seconds); nullopt with `error` saying why for the CPU
// (bench-engine measures host memory itself) or a device it cannot measure.
std::optional<double> measure_device_bandwidth(std::string_view name, std::string& error);

// A backend for `model`: "cpu", "cuda", or "auto" (the first of backend_names() that can run
// here). Throws BackendUnavailable for a known backend this build or machine cannot run, and
// std::invalid_argument for an unknown name.
std::unique_ptr<Backend> make_backend(std::string_view name, std::shared_ptr<const Model> model,
                                      const BackendOptions& options = {});

}  // namespace chatflow::engine
