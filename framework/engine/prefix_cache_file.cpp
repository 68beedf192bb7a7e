#include "framework/engine/prefix_cache_file.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace chatflow::engine {
namespace {

// "CFKVPC" and a format version; then the identity, the block count, the blocks (hash, parent
// hash, token count, tokens, the backend's bytes) and an FNV-1a digest of everything before it.
constexpr char kMagic[8] = {'C', 'F', 'K', 'V', 'P', 'C', '0', '1'};

class Digest {
 public:
  void add(const void* data, size_t size) {
    const auto* bytes = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < size; ++i) {
      value_ ^= bytes[i];
      value_ *= 0x100000001b3ull;
    }
  }
  uint64_t value() const { return value_; }

 private:
  uint64_t value_ = 0xcbf29ce484222325ull;
};

class Writer {
 public:
  explicit Writer(std::ofstream& out) : out_(out) {}
  void bytes(const void* data, size_t size) {
    digest_.add(data, size);
    out_.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
    written_ += size;
  }
  template <class T>
  void value(const T& value) {
    bytes(&value, sizeof value);
  }
  void digest() {
    const uint64_t value = digest_.value();
    out_.write(reinterpret_cast<const char*>(&value), sizeof value);
    written_ += sizeof value;
  }
  uint64_t written() const { return written_; }

 private:
  std::ofstream& out_;
  Digest digest_;
  uint64_t written_ = 0;
};

// Reads what a Writer wrote; every read past the end sets failed() instead of throwing.
class Reader {
 public:
  explicit Reader(std::ifstream& in) : in_(in) {}
  bool bytes(void* data, size_t size) {
    if (failed_ || !in_.read(static_cast<char*>(data), static_cast<std::streamsize>(size))) {
      failed_ = true;
      return false;
    }
    digest_.add(data, size);
    return true;
  }
  template <class T>
  bool value(T& value) {
    return bytes(&value, sizeof value);
  }
  bool failed() const { return failed_; }
  uint64_t digest() const { return digest_.value(); }
  std::ifstream& stream() { return in_; }

 private:
  std::ifstream& in_;
  Digest digest_;
  bool failed_ = false;
};

void write_identity(Writer& out, const PrefixCacheIdentity& identity) {
  out.bytes(kMagic, sizeof kMagic);
  out.value(identity.model);
  out.value(static_cast<uint32_t>(identity.backend.size()));
  out.bytes(identity.backend.data(), identity.backend.size());
  out.value(identity.kv_type);
  out.value(identity.block_tokens);
  out.value(identity.block_bytes);
}

// Why the identity read differs from `expected`, or "".
std::string read_identity(Reader& in, const PrefixCacheIdentity& expected) {
  char magic[sizeof kMagic];
  PrefixCacheIdentity found;
  uint32_t backend_length = 0;
  if (!in.bytes(magic, sizeof magic) || std::memcmp(magic, kMagic, sizeof magic) != 0)
    return "it is not a chatflow prefix cache file of this version";
  if (!in.value(found.model) || !in.value(backend_length) || backend_length > 256)
    return "it is cut short";
  found.backend.resize(backend_length);
  if (!in.bytes(found.backend.data(), backend_length) || !in.value(found.kv_type) ||
      !in.value(found.block_tokens) || !in.value(found.block_bytes))
    return "it is cut short";
  if (found.model != expected.model) return "it was written for another model file";
  if (found.backend != expected.backend)
    return "it was written by the " + found.backend + " backend, not " + expected.backend;
  if (found.kv_type != expected.kv_type) {
    auto name = [](uint32_t type) {
      return type < static_cast<uint32_t>(kernels::kKvTypes)
                 ? std::string(kernels::to_string(static_cast<kernels::KvType>(type)))
                 : "type " + std::to_string(type);
    };
    return "it holds another KV cache type (" + name(found.kv_type) + ", not " +
           name(expected.kv_type) + ")";
  }
  if (found.block_tokens != expected.block_tokens || found.block_bytes != expected.block_bytes)
    return "its KV blocks are " + std::to_string(found.block_tokens) + " positions of " +
           std::to_string(found.block_bytes) + " bytes, not " +
           std::to_string(expected.block_tokens) + " of " + std::to_string(expected.block_bytes);
  return "";
}

struct SavedBlock {
  uint64_t hash = 0;
  uint64_t parent = 0;
  std::vector<TokenId> tokens;
};

// One block's header and tokens; false at the end of the blocks or on a malformed one.
bool read_block_header(Reader& in, int64_t block_tokens, SavedBlock& block) {
  uint32_t count = 0;
  if (!in.value(block.hash) || !in.value(block.parent) || !in.value(count) || count != block_tokens)
    return false;
  block.tokens.resize(count);
  return in.bytes(block.tokens.data(), count * sizeof(TokenId));
}

// Reads the whole file once to check its digest, so that a damaged file is never half used.
std::string check_whole_file(const std::string& path, const PrefixCacheIdentity& identity) {
  std::ifstream file(path, std::ios::binary);
  Reader in(file);
  if (std::string why = read_identity(in, identity); !why.empty()) return why;
  uint64_t count = 0;
  if (!in.value(count)) return "it is cut short";
  SavedBlock block;
  std::vector<std::byte> bytes(identity.block_bytes);
  for (uint64_t i = 0; i < count; ++i) {
    if (!read_block_header(in, identity.block_tokens, block) ||
        !in.bytes(bytes.data(), bytes.size()))
      return "it is cut short or damaged (block " + std::to_string(i) + " of " +
             std::to_string(count) + ")";
  }
  const uint64_t computed = in.digest();
  uint64_t stored = 0;
  if (!file.read(reinterpret_cast<char*>(&stored), sizeof stored)) return "it is cut short";
  if (stored != computed) return "its digest does not match: the file is damaged";
  return "";
}

}  // namespace

uint64_t model_fingerprint(const Model& model) {
  Digest digest;
  const GgufFile& file = model.file();
  for (const GgufTensorInfo& tensor : file.tensors()) {
    digest.add(tensor.name.data(), tensor.name.size());
    const auto type = static_cast<uint32_t>(tensor.type);
    digest.add(&type, sizeof type);
    digest.add(tensor.shape.data(), tensor.shape.size() * sizeof(int64_t));
    digest.add(&tensor.bytes, sizeof tensor.bytes);
    if (tensor.data) digest.add(tensor.data, std::min<uint64_t>(tensor.bytes, 64));
  }
  return digest.value();
}

PrefixCacheSaved save_prefix_cache(const std::string& path, const PrefixCacheIdentity& identity,
                                   const PrefixCache& cache, const Backend& backend,
                                   uint64_t max_bytes) {
  const uint64_t per_block = 2 * sizeof(uint64_t) + sizeof(uint32_t) +
                             static_cast<uint64_t>(identity.block_tokens) * sizeof(TokenId) +
                             identity.block_bytes;
  const uint64_t fixed = 128 + identity.backend.size();
  const uint64_t fits = max_bytes > fixed ? (max_bytes - fixed) / per_block : 0;
  struct Cached {
    uint64_t parent;
    std::vector<TokenId> tokens;
    BlockId block;
  };
  std::unordered_map<uint64_t, Cached> cached;
  std::vector<uint64_t> most_recent_first;
  cache.for_each(
      [&](uint64_t hash, uint64_t parent, std::span<const TokenId> tokens, BlockId block) {
        cached.emplace(hash, Cached{parent, {tokens.begin(), tokens.end()}, block});
        most_recent_first.push_back(hash);
      });
  // A block is only found after the blocks before it: each one kept comes with its whole chain,
  // chains of the most recently used blocks first, as many whole chains as fit.
  std::vector<uint64_t> chosen;
  std::unordered_set<uint64_t> taken;
  for (uint64_t hash : most_recent_first) {
    std::vector<uint64_t> chain;
    for (uint64_t link = hash; cached.count(link) && !taken.count(link);
         link = cached.at(link).parent)
      chain.push_back(link);
    if (chain.empty() || chosen.size() + chain.size() > fits) continue;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      chosen.push_back(*it);
      taken.insert(*it);
    }
  }
  const std::string temporary = path + ".partial";
  std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
  if (!file) throw std::runtime_error("cannot write '" + temporary + "'");
  Writer out(file);
  write_identity(out, identity);
  out.value(static_cast<uint64_t>(chosen.size()));
  std::vector<std::byte> bytes(identity.block_bytes);
  for (uint64_t hash : chosen) {
    const Cached& block = cached.at(hash);
    out.value(hash);
    out.value(block.parent);
    out.value(static_cast<uint32_t>(block.tokens.size()));
    out.bytes(block.tokens.data(), block.tokens.size() * sizeof(TokenId));
    backend.read_kv_block(block.block, bytes);
    out.bytes(bytes.data(), bytes.size());
  }
  out.digest();
  file.flush();
  if (!file) {
    std::remove(temporary.c_str());
    throw std::runtime_error("cannot write '" + temporary + "' (disk full?)");
  }
  PrefixCacheSaved saved{static_cast<int64_t>(chosen.size()), out.written()};
  file.close();
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) {
    std::remove(temporary.c_str());
    throw std::runtime_error("cannot replace '" + path + "': " + error.message());
  }
  return saved;
}

PrefixCacheRestored restore_prefix_cache(const std::string& path,
                                         const PrefixCacheIdentity& identity, PrefixCache& cache,
                                         KvBlockAllocator& blocks, Backend& backend) {
  PrefixCacheRestored restored;
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return restored;
  restored.found = true;
  if (std::string why = check_whole_file(path, identity); !why.empty()) {
    restored.refused = why;
    return restored;
  }
  std::ifstream file(path, std::ios::binary);
  Reader in(file);
  read_identity(in, identity);
  uint64_t count = 0;
  in.value(count);
  // Chains of the most recently used blocks first in the file, each from its first block; put
  // in the cache last to first, so that recent chains and first blocks are evicted last.
  struct Loaded {
    uint64_t hash;
    uint64_t parent;
    std::vector<TokenId> tokens;
    BlockId block;
  };
  std::vector<Loaded> loaded;
  std::vector<std::byte> bytes(identity.block_bytes);
  SavedBlock block;
  for (uint64_t i = 0; i < count; ++i) {
    if (!read_block_header(in, identity.block_tokens, block) ||
        !in.bytes(bytes.data(), bytes.size()))
      break;  // checked above: only if the file changed meanwhile
    std::optional<BlockId> free_block = blocks.allocate();
    if (!free_block) break;  // the pool is full: the rest are older
    backend.write_kv_block(*free_block, bytes);
    loaded.push_back({block.hash, block.parent, block.tokens, *free_block});
  }
  for (auto it = loaded.rbegin(); it != loaded.rend(); ++it) {
    cache.insert(it->hash, it->parent, it->tokens, it->block);
    blocks.release(it->block);  // the cache's own reference stays
  }
  restored.blocks = static_cast<int64_t>(loaded.size());
  return restored;
}

}  // namespace chatflow::engine
