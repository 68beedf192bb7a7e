#include "framework/responses/response_store.h"

namespace chatflow::responses {
namespace {

std::string key_of(const std::string& owner, const std::string& id) {
  std::string key = owner;
  key += '\0';
  key += id;
  return key;
}

// What an entry costs, near enough to bound the store's memory.
size_t size_of(const std::string& key, const std::string& response_json,
               const std::vector<Message>& conversation) {
  size_t bytes = key.size() * 2 + response_json.size() + 128;
  for (const Message& message : conversation) {
    bytes += message.role.size() + message.content.size() + message.tool_call_id.size() + 64;
    for (const ToolCall& call : message.tool_calls)
      bytes += call.id.size() + call.name.size() + call.arguments.size() + 32;
  }
  return bytes;
}

}  // namespace

std::optional<std::string> owner_of(bool pipeline_authenticates, const Identity& caller) {
  if (!pipeline_authenticates) return std::string();
  std::string owner = caller.owner();
  if (owner.empty()) return std::nullopt;
  return caller.tenant + "\n" + owner;
}

void ResponseStore::put(const std::string& owner, const std::string& id, std::string response_json,
                        std::vector<Message> conversation) {
  std::string key = key_of(owner, id);
  size_t bytes = size_of(key, response_json, conversation);
  std::lock_guard lock(mutex_);
  if (auto found = entries_.find(key); found != entries_.end()) {
    bytes_ -= found->second.bytes;
    oldest_first_.erase(found->second.age);
    entries_.erase(found);
  }
  oldest_first_.push_back(key);
  Entry entry{std::move(response_json), std::move(conversation), bytes,
              std::prev(oldest_first_.end())};
  entries_.emplace(std::move(key), std::move(entry));
  bytes_ += bytes;
  evict_locked();
}

void ResponseStore::evict_locked() {
  // The newest entry stays even when it alone is over the byte bound: it was just answered.
  while (oldest_first_.size() > 1 && (entries_.size() > max_responses_ || bytes_ > max_bytes_)) {
    auto oldest = entries_.find(oldest_first_.front());
    bytes_ -= oldest->second.bytes;
    entries_.erase(oldest);
    oldest_first_.pop_front();
  }
}

std::optional<std::string> ResponseStore::response_json(const std::string& owner,
                                                        const std::string& id) const {
  std::lock_guard lock(mutex_);
  auto found = entries_.find(key_of(owner, id));
  if (found == entries_.end()) return std::nullopt;
  return found->second.response_json;
}

std::optional<std::vector<Message>> ResponseStore::conversation(const std::string& owner,
                                                                const std::string& id) const {
  std::lock_guard lock(mutex_);
  auto found = entries_.find(key_of(owner, id));
  if (found == entries_.end()) return std::nullopt;
  return found->second.conversation;
}

bool ResponseStore::erase(const std::string& owner, const std::string& id) {
  std::lock_guard lock(mutex_);
  auto found = entries_.find(key_of(owner, id));
  if (found == entries_.end()) return false;
  bytes_ -= found->second.bytes;
  oldest_first_.erase(found->second.age);
  entries_.erase(found);
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

size_t ResponseStore::bytes() const {
  std::lock_guard lock(mutex_);
  return bytes_;
}

}  // namespace chatflow::responses
