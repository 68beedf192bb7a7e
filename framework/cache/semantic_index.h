// Cached answers found by meaning. A partition (tenant, model, system prompt, answer shape...)
// holds the answers to questions asked first in a conversation, found through one vector graph
// (hnswlib) by inner product of unit vectors (cosine similarity), and the answers to later
// questions, each under the digest of the turns before it (its context): those are compared one
// by one with the entries of the same context only, so a follow-up never meets another
// conversation's. A partition holds at most `max_entries`; the oldest entries go first.
// Thread-safe: searches share a partition, insertions and corrections take it alone.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "framework/cache/cached_answer.h"

namespace chatflow::cache {

struct SemanticEntry {
  SemanticEntry() = default;
  // The context defaults to none (a conversation's first question); only shared entries have
  // an id.
  SemanticEntry(std::vector<float> vector, std::string question,
                std::shared_ptr<const CachedAnswer> answer, std::string context = {},
                std::string id = {})
      : vector(std::move(vector)),
        question(std::move(question)),
        answer(std::move(answer)),
        context(std::move(context)),
        id(std::move(id)) {}

  std::vector<float> vector;  // the question's
  std::string question;       // the newest user message, for the verifier
  std::shared_ptr<const CachedAnswer> answer;
  std::string context;  // the digest of the turns before the question; empty: there were none
  std::string id;       // shared entries' (Redis): inserting an id the partition holds is a no-op
};

struct SemanticMatch {
  float similarity = 0;
  std::shared_ptr<const SemanticEntry> entry;
};

class SemanticIndex {
 public:
  SemanticIndex(size_t dimensions, size_t max_entries);
  ~SemanticIndex();

  // Up to `k` live entries of `context` (empty: first questions), most similar first.
  std::vector<SemanticMatch> search(const std::string& partition, const std::string& context,
                                    const std::vector<float>& query, size_t k) const;
  void insert(const std::string& partition, SemanticEntry entry);
  // Forgets, in every partition whose name starts with `prefix`: everything (no `near`), or the
  // entries of `context` at least `threshold` similar to `near`. Returns how many; their ids go
  // to `forgotten_ids` when given.
  size_t forget(const std::string& prefix, const std::string& context,
                const std::vector<float>* near, float threshold,
                std::vector<std::string>* forgotten_ids = nullptr);
  size_t size(const std::string& partition) const;

 private:
  struct Partition;
  std::shared_ptr<Partition> partition(const std::string& name, bool create) const;

  size_t dimensions_;
  size_t max_entries_;
  mutable std::mutex mutex_;
  mutable std::map<std::string, std::shared_ptr<Partition>> partitions_;
};

}  // namespace chatflow::cache
