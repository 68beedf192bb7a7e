// A bounded map of cached answers: least recently used entries go first when the entry or byte
// budget is exceeded, and entries past their time to live are never returned. Thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "framework/cache/cached_answer.h"

namespace chatflow::cache {

class LruStore {
 public:
  LruStore(size_t max_entries, size_t max_bytes);

  std::shared_ptr<const CachedAnswer> get(const std::string& key);
  void put(const std::string& key, std::shared_ptr<const CachedAnswer> answer);
  // Removes entries for which `matches` is true; returns how many.
  size_t erase_if(const std::function<bool(const CachedAnswer&)>& matches);
  size_t size() const;

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const CachedAnswer>>;
  void evict_locked();

  size_t max_entries_;
  size_t max_bytes_;
  size_t bytes_ = 0;
  mutable std::mutex mutex_;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

}  // namespace chatflow::cache
