// What a model with a prefix cache offers the server's admin routes (POST
// /admin/prefix_cache/save and /clear): its cache written to its kv_cache.persist file on demand,
// as a drain writes it, or forgotten with that file, as vLLM's /reset_prefix_cache does.
#pragma once

#include <cstdint>
#include <string>

namespace chatflow {

class PrefixCacheAdmin {
 public:
  struct Saved {
    int64_t blocks = 0;
    uint64_t bytes = 0;  // the file's size
    std::string path;
  };
  struct Cleared {
    int64_t blocks = 0;         // forgotten; those sequences use stay with them until they end
    bool file_removed = false;  // the persist file was there and is gone
  };

  virtual ~PrefixCacheAdmin() = default;
  // False for a model without a prefix cache (tokenizer_only, or prefix caching off).
  virtual bool has_prefix_cache() const = 0;
  // The file saves go to; empty when the cache is not kept across restarts.
  virtual std::string prefix_cache_file() const = 0;
  // Both run between two engine steps (decoding waits meanwhile) and throw std::runtime_error
  // with the reason when they cannot (no file set, a write that failed, the engine stopping).
  virtual Saved save_prefix_cache() = 0;
  virtual Cleared clear_prefix_cache() = 0;
};

}  // namespace chatflow
