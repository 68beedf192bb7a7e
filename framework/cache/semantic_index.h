// Cached answers found by meaning: one vector graph (hnswlib) per partition (tenant, model, system
// prompt), searched by inner product of unit vectors (cosine similarity). A partition holds at
// most `max_entries`; the oldest entries go first. Thread-safe: searches share a partition,
// insertions and corrections take it alone.
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
  // The id defaults: only shared entries have one.
  SemanticEntry(std::vector<float> vector, std::string question,
                std::shared_ptr<const CachedAnswer> answer, std::string id = {})
      : vector(std::move(vector)),
        question(std::move(question)),
        answer(std::move(answer)),
        id(std::move(id)) {}

  std::vector<float> vector;
  std::string question;  // the newest user message, for the verifier
  std::shared_ptr<const CachedAnswer> answer;
  std::string id;  // shared entries' (Redis): inserting an id the partition holds is a no-op
};

struct SemanticMatch {
  float similarity = 0;
  std::shared_ptr<const SemanticEntry> entry;
};

class SemanticIndex {
 public:
  SemanticIndex(size_t dimensions, size_t max_entries);
  ~SemanticIndex();

  // Up to `k` live entries, most similar first.
  std::vector<SemanticMatch> search(const std::string& partition, const std::vector<float>& query,
                                    size_t k) const;
  void insert(const std::string& partition, SemanticEntry entry);
  // Forgets, in every partition whose name starts with `prefix`: everything (no `near`), or the
  // entries at least `threshold` similar to `near`. Returns how many; their ids go to
  // `forgotten_ids` when given.
  size_t forget(const std::string& prefix, const std::vector<float>* near, float threshold,
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

// Whether two questions that embed alike ask the same thing: the same numbers, the same
// negations (not, never, no, 不, 没...), and the same names (capitalised words inside a
// sentence, acronyms). "Is X safe?" and "Is X not safe?" differ.
bool same_question(const std::string& a, const std::string& b);

}  // namespace chatflow::cache
