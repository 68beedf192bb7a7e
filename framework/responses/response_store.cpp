#include "framework/responses/response_store.h"

#include <boost/json.hpp>

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

std::string conversation_json(const std::vector<Message>& conversation) {
  namespace json = boost::json;
  json::array messages;
  for (const Message& message : conversation) {
    json::array calls;
    for (const ToolCall& call : message.tool_calls)
      calls.push_back({{"id", call.id}, {"name", call.name}, {"arguments", call.arguments}});
    messages.push_back({{"role", message.role},
                        {"content", message.content},
                        {"tool_calls", std::move(calls)},
                        {"tool_call_id", message.tool_call_id}});
  }
  return json::serialize(messages);
}

std::optional<std::vector<Message>> conversation_of_json(std::string_view text) {
  namespace json = boost::json;
  json::error_code error;
  json::value parsed = json::parse(text, error);
  if (error || !parsed.is_array()) return std::nullopt;
  auto string_of = [](const json::object& object,
                      std::string_view key) -> std::optional<std::string> {
    const json::value* value = object.if_contains(key);
    if (!value || !value->is_string()) return std::nullopt;
    return std::string(value->get_string());
  };
  std::vector<Message> conversation;
  for (const json::value& item : parsed.get_array()) {
    if (!item.is_object()) return std::nullopt;
    const json::object& object = item.get_object();
    auto role = string_of(object, "role");
    auto content = string_of(object, "content");
    auto call_id = string_of(object, "tool_call_id");
    const json::value* calls = object.if_contains("tool_calls");
    if (!role || !content || !call_id || !calls || !calls->is_array()) return std::nullopt;
    Message message(*role, *content, {}, *call_id);
    for (const json::value& call : calls->get_array()) {
      if (!call.is_object()) return std::nullopt;
      auto id = string_of(call.get_object(), "id");
      auto name = string_of(call.get_object(), "name");
      auto arguments = string_of(call.get_object(), "arguments");
      if (!id || !name || !arguments) return std::nullopt;
      message.tool_calls.push_back({*id, *name, *arguments});
    }
    conversation.push_back(std::move(message));
  }
  return conversation;
}

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
