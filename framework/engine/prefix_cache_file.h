// The prefix cache across restarts (gguf_model kv_cache.persist): its blocks written to a file
// when the engine stops, most recently used first up to a size, and read back when it starts, so a
// fleet's system prompts and documents are not computed again after every deploy (llama.cpp's
// --slot-save-path, vLLM's LMCache do the like). A block is kept with its hash (the chain rooted in
// the tenant's salt, so tenants still share nothing) and its tokens, which every lookup compares.
//
// A file is used only by the model, backend and KV layout that wrote it: anything else (another
// model or quantisation, another KV type or block size, a damaged or cut file) is refused with the
// reason and left alone, never half used.
#pragma once

#include <cstdint>
#include <string>

#include "framework/engine/backend.h"
#include "framework/engine/kv_block_allocator.h"
#include "framework/engine/model.h"
#include "framework/engine/prefix_cache.h"

namespace chatflow::engine {

// What the saved keys and values depend on.
struct PrefixCacheIdentity {
  uint64_t model = 0;  // model_fingerprint()
  std::string backend;
  uint32_t kv_type = 0;
  int64_t block_tokens = 0;
  uint64_t block_bytes = 0;
};

// A digest of the model file's tensor table and the first bytes of every tensor's data: another
// model, another quantisation or another fine-tune of the same shape differ.
uint64_t model_fingerprint(const Model& model);

struct PrefixCacheSaved {
  int64_t blocks = 0;
  uint64_t bytes = 0;  // the file's size
};

// Writes the cached blocks to `path` (through a temporary file renamed over it), at most
// `max_bytes` of file. Throws std::runtime_error naming the path when it cannot be written.
PrefixCacheSaved save_prefix_cache(const std::string& path, const PrefixCacheIdentity& identity,
                                   const PrefixCache& cache, const Backend& backend,
                                   uint64_t max_bytes);

struct PrefixCacheRestored {
  int64_t blocks = 0;
  std::string refused;  // why the file was not used; empty when it was (or there was none)
  bool found = false;   // a file was there
};

// Reads `path` into free blocks of the pool, as cached blocks no sequence uses (evicted first when
// the pool needs room), as many as are free, most recently used first.
PrefixCacheRestored restore_prefix_cache(const std::string& path,
                                         const PrefixCacheIdentity& identity, PrefixCache& cache,
                                         KvBlockAllocator& blocks, Backend& backend);

}  // namespace chatflow::engine
