// The responses a server keeps for OpenAI's Responses API (`store`, `previous_response_id`, GET and
// DELETE /v1/responses/{id}): per owner, in memory, bounded. Each entry holds the response object
// as it was answered and the conversation it ended (its input turns and its answer), so a request
// that continues from it needs no chain of earlier entries, and evicting an old entry breaks no
// newer one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "framework/api/request.h"

namespace chatflow::responses {

// Who may read a kept response: "" for every caller of a pipeline without authentication (it
// knows no callers apart); "TENANT\nOWNER" for an authenticated one (Identity::owner(), as
// sessions are owned); nullopt for an authenticated caller who owns nothing (a JWT without a user
// claim), who can keep nothing.
std::optional<std::string> owner_of(bool pipeline_authenticates, const Identity& caller);

// Where kept responses live: this server's memory (ResponseStore, the default), or the
// pipeline's history store (the server's adapter, framework/server/kept_response_store.h), shared
// by a fleet and kept through restarts. `owner` is owner_of's.
class ResponseKeeper {
 public:
  virtual ~ResponseKeeper() = default;
  // Keeps (or replaces) a response.
  virtual void put(const std::string& owner, const std::string& id, std::string response_json,
                   std::vector<Message> conversation) = 0;
  // The response object's JSON, or nullopt when `owner` kept no response `id`.
  virtual std::optional<std::string> response_json(const std::string& owner,
                                                   const std::string& id) const = 0;
  // The conversation response `id` ended, or nullopt as above.
  virtual std::optional<std::vector<Message>> conversation(const std::string& owner,
                                                           const std::string& id) const = 0;
  // Forgets the response; false when `owner` kept none of that id.
  virtual bool erase(const std::string& owner, const std::string& id) = 0;
  // Whether a read may wait (a database): the server then reads off its I/O threads.
  virtual bool reads_wait() const { return false; }
};

// A conversation as a kept response's JSON holds it ([{"role", "content", "tool_calls":
// [{"id", "name", "arguments"}], "tool_call_id"}]), and back; nullopt for text that is not one.
std::string conversation_json(const std::vector<Message>& conversation);
std::optional<std::vector<Message>> conversation_of_json(std::string_view text);

// The responses kept in this server's memory, at most max_responses and about max_bytes of them.
class ResponseStore final : public ResponseKeeper {
 public:
  // The defaults: what one server keeps before the oldest responses go.
  static constexpr size_t kDefaultMaxResponses = 10000;
  static constexpr size_t kDefaultMaxBytes = size_t{256} << 20;

  explicit ResponseStore(size_t max_responses = kDefaultMaxResponses,
                         size_t max_bytes = kDefaultMaxBytes)
      : max_responses_(max_responses), max_bytes_(max_bytes) {}

  // The oldest ones go while more than the bounds are kept.
  void put(const std::string& owner, const std::string& id, std::string response_json,
           std::vector<Message> conversation) override;
  std::optional<std::string> response_json(const std::string& owner,
                                           const std::string& id) const override;
  std::optional<std::vector<Message>> conversation(const std::string& owner,
                                                   const std::string& id) const override;
  bool erase(const std::string& owner, const std::string& id) override;

  size_t size() const;
  size_t bytes() const;

 private:
  struct Entry {
    std::string response_json;
    std::vector<Message> conversation;
    size_t bytes = 0;
    std::list<std::string>::iterator age;  // its place in oldest_first_
  };
  void evict_locked();

  size_t max_responses_;
  size_t max_bytes_;
  mutable std::mutex mutex_;
  std::map<std::string, Entry> entries_;  // by owner + '\0' + id
  std::list<std::string> oldest_first_;   // keys of entries_, in the order they were kept
  size_t bytes_ = 0;
};

}  // namespace chatflow::responses
