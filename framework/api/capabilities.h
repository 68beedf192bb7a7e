// What a stage or resource can offer the HTTP server beyond handling requests: authentication
// for the routes outside the pipeline (/v1/models, /tokenize, /metrics, /v1/usage...) and usage
// reports. The server finds them in a built pipeline with Pipeline::find<T>().
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "framework/api/request.h"

namespace chatflow {

class Authenticator {
 public:
  virtual ~Authenticator() = default;
  // The caller's identity from the request's header fields; throws RequestFailure (401) when
  // credentials are missing or wrong. Never waits (the server calls it on its I/O thread): a
  // decision that needs a wait is a 401 that says to retry.
  virtual Identity authenticate(const HeaderFields& headers) const = 0;
  // The same for a request that goes on through this authenticator as its pipeline's first
  // stage: nullopt when the decision needs a wait (a token signed with a key the provider's key
  // set is being fetched for), which the stage then makes without holding a thread.
  virtual std::optional<Identity> authenticate_or_defer(const HeaderFields& headers) const {
    return authenticate(headers);
  }
  // Whether `path` (e.g. "/health", "/metrics") is open without credentials.
  virtual bool is_public(std::string_view path) const = 0;
  // A key created at start-up for development (shown once), if this start created one.
  virtual std::optional<std::string> new_development_key() const { return std::nullopt; }
};

class UsageReporter {
 public:
  virtual ~UsageReporter() = default;
  // {"object": "list", "data": [{"tenant", "requests", "prompt_tokens", "completion_tokens",
  // "total_tokens", "quota_tokens", "period"...}]} for `tenant`, or for every tenant when empty.
  virtual std::string usage_json(const std::string& tenant) const = 0;
};

// What an admin asks to forget: one tenant's entries for one conversation (messages or prompt),
// or with `everything`, all of the tenant's entries.
struct CacheCorrection {
  std::string tenant;
  std::string model;  // empty: any model
  std::vector<Message> messages;
  std::string prompt;
  bool everything = false;
};

// A cache the server can correct (DELETE /v1/cache).
class CacheAdmin {
 public:
  virtual ~CacheAdmin() = default;
  virtual std::string cache_name() const = 0;  // "exact", "semantic"
  // Removes the matching entries; returns how many.
  virtual size_t forget(const CacheCorrection& correction) = 0;
};

// A session as a list of sessions shows it.
struct SessionInfo {
  std::string id;
  std::string title;       // the title its owner set, else its first user message cut short
  int64_t created_at = 0;  // Unix seconds of its first turn
  int64_t updated_at = 0;  // and of its last
  int64_t turns = 0;
};

struct SessionList {
  std::vector<SessionInfo> sessions;
  bool has_more = false;
};

// Session history the server can show and manage (/v1/sessions, /v1/sessions/{id}). Every call
// names the owner (Identity::owner()) in its tenant: another owner's session of the same id is
// none.
class HistoryReader {
 public:
  virtual ~HistoryReader() = default;
  // {"object": "session", "id", "turns": [{"user", "assistant", "status", ...}]} of the session
  // `session`; nullopt when there is none.
  virtual std::optional<std::string> session_json(const std::string& tenant,
                                                  const std::string& owner,
                                                  const std::string& session) = 0;
  // The owner's sessions, latest activity first: at most `limit`, those after the session
  // `after` (empty: from the latest). nullopt when `after` names none of the owner's sessions.
  virtual std::optional<SessionList> list_sessions(const std::string& tenant,
                                                   const std::string& owner, size_t limit,
                                                   const std::string& after) = 0;
  // Deletes the session for good; false when there was none.
  virtual bool delete_session(const std::string& tenant, const std::string& owner,
                              const std::string& session) = 0;
  // Sets the session's title; nullopt when there is no such session.
  virtual std::optional<SessionInfo> rename_session(const std::string& tenant,
                                                    const std::string& owner,
                                                    const std::string& session,
                                                    const std::string& title) = 0;
  // Deletes every session of the owner for good (DELETE /v1/sessions); returns how many.
  virtual int64_t delete_sessions(const std::string& tenant, const std::string& owner) = 0;
  // Every session of the owner with all its turns, latest activity first (GET
  // /v1/sessions:export): `write` gets one JSON object per session, {"object": "session", "id",
  // "title", "created_at", "updated_at", "turns": [...]}, each ending in a newline. Returns how
  // many sessions were written.
  virtual int64_t export_sessions(const std::string& tenant, const std::string& owner,
                                  const std::function<void(const std::string& line)>& write) = 0;
};

// How a store's writes have gone: a full disk or a file gone read-only loses writes, which the
// server counts in /metrics and reports on /health.
struct StorageStatus {
  std::string store;  // "history", "usage"
  int64_t lost_writes = 0;
  int64_t last_failure_time = 0;  // Unix seconds; 0: never
};

class StorageHealth {
 public:
  virtual ~StorageHealth() = default;
  virtual StorageStatus storage_status() const = 0;
};

// A model resource (gguf_model, upstream) as the gates that name it as their `model` see it: how
// many tokens a request's prompt holds and how long its answer may be, the same bound its
// generator holds the answer to, so what a gate reserves is what the answer can spend.
class AnswerTokenBound {
 public:
  virtual ~AnswerTokenBound() = default;
  // The prompt's tokens as the model reads them: exact with the model's tokenizer, else never
  // fewer (an upper bound from the prompt's bytes).
  virtual int64_t prompt_token_count(const Request& request) const = 0;
  // The most tokens the answer after `prompt_tokens` may have: max_tokens when given, else the
  // model's bound (max_tokens_default, what the context leaves, or kMaxTokensWithoutContext),
  // held to generation.answer_token_cap when a gate set one.
  virtual int64_t answer_token_limit(const GenerationParams& generation,
                                     int64_t prompt_tokens) const = 0;
  // The context a prompt and its answer share; 0 when unknown.
  virtual int64_t context_token_limit() const = 0;
};

}  // namespace chatflow
