// Conversation turns kept on the server, by tenant, owner (a user, or a key without one) and
// session: SQLite (a file, WAL, one writer thread that commits in batches) or memory (tests). A
// turn is one user message and the answer to it, with how it ended; only completed turns are
// given back as context. Another owner's session of the same id is another session: one caller
// can neither read nor extend another's conversation.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

struct sqlite3;

namespace chatflow::history {

enum class TurnStatus { completed, cancelled, filtered, failed };
std::string_view to_string(TurnStatus status);

struct Turn {
  std::string user;
  std::string assistant;
  TurnStatus status = TurnStatus::completed;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t time = 0;  // Unix seconds
};

// Whose session: Identity::owner() names the owner.
struct SessionKey {
  std::string tenant;
  std::string owner;
  std::string session;

  auto operator<=>(const SessionKey&) const = default;
};

class HistoryStore {
 public:
  virtual ~HistoryStore() = default;
  // Every turn of the session, oldest first (all statuses).
  virtual std::vector<Turn> load(const SessionKey& key) = 0;
  // Records a turn. With `durable`, returns only once it is committed (it then survives a crash
  // of the process), false when the write failed; otherwise queues it and returns true, and a
  // failed write is only counted (lost_turns) and logged.
  virtual bool append(const SessionKey& key, Turn turn, bool durable) = 0;
  // Turns that could not be written since the store opened, and when the last such failure was
  // (Unix seconds, 0 if never).
  virtual int64_t lost_turns() const { return 0; }
  virtual int64_t last_failure_time() const { return 0; }
};

std::unique_ptr<HistoryStore> make_memory_store();
// Throws std::runtime_error when the file cannot be opened or set up.
std::unique_ptr<HistoryStore> make_sqlite_store(const std::string& path);

}  // namespace chatflow::history
