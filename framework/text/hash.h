// Small non-cryptographic hashes shared by the embedder, the retrieval index and A/B splits
// (SHA-256 for keys that must not collide on purpose is in framework/security/crypto.h).
#pragma once

#include <cstdint>
#include <string_view>

namespace chatflow {

inline constexpr uint64_t kFnvOffsetBasis = 1469598103934665603ull;

// 64-bit FNV-1a, from `basis` (the standard offset basis, or one derived from a seed).
inline uint64_t fnv1a(std::string_view text, uint64_t basis = kFnvOffsetBasis) {
  uint64_t hash = basis;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

// splitmix64's finaliser: every input bit reaches every output bit (FNV alone mixes its low
// bits poorly for short keys).
inline uint64_t avalanche(uint64_t hash) {
  hash ^= hash >> 30;
  hash *= 0xbf58476d1ce4e5b9ull;
  hash ^= hash >> 27;
  hash *= 0x94d049bb133111ebull;
  hash ^= hash >> 31;
  return hash;
}

}  // namespace chatflow
