#include "framework/cache/lru_store.h"

namespace chatflow::cache {

LruStore::LruStore(size_t max_entries, size_t max_bytes)
    : max_entries_(max_entries), max_bytes_(max_bytes) {}

std::shared_ptr<const CachedAnswer> LruStore::get(const std::string& key) {
  std::lock_guard lock(mutex_);
  auto found = index_.find(key);
  if (found == index_.end()) return nullptr;
  if (found->second->second->expires <= std::chrono::steady_clock::now()) {
    bytes_ -= found->second->second->bytes();
    order_.erase(found->second);
    index_.erase(found);
    return nullptr;
  }
  order_.splice(order_.begin(), order_, found->second);
  return found->second->second;
}

void LruStore::put(const std::string& key, std::shared_ptr<const CachedAnswer> answer) {
  std::lock_guard lock(mutex_);
  if (auto found = index_.find(key); found != index_.end()) {
    bytes_ -= found->second->second->bytes();
    order_.erase(found->second);
    index_.erase(found);
  }
  bytes_ += answer->bytes();
  order_.emplace_front(key, std::move(answer));
  index_[key] = order_.begin();
  evict_locked();
}

void LruStore::evict_locked() {
  while (!order_.empty() && (order_.size() > max_entries_ || bytes_ > max_bytes_)) {
    bytes_ -= order_.back().second->bytes();
    index_.erase(order_.back().first);
    order_.pop_back();
  }
}

size_t LruStore::erase_if(const std::function<bool(const CachedAnswer&)>& matches) {
  std::lock_guard lock(mutex_);
  size_t removed = 0;
  for (auto it = order_.begin(); it != order_.end();) {
    if (matches(*it->second)) {
      bytes_ -= it->second->bytes();
      index_.erase(it->first);
      it = order_.erase(it);
      ++removed;
    } else {
      ++it;
    }
  }
  return removed;
}

size_t LruStore::size() const {
  std::lock_guard lock(mutex_);
  return order_.size();
}

}  // namespace chatflow::cache
