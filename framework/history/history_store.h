// Conversation turns kept on the server, by tenant and session: SQLite (a file, WAL, one writer
// thread that commits in batches) or memory (tests). A turn is one user message and the answer
// to it, with how it ended; only completed turns are given back as context.
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

class HistoryStore {
 public:
  virtual ~HistoryStore() = default;
  // Every turn of the session, oldest first (all statuses).
  virtual std::vector<Turn> load(const std::string& tenant, const std::string& session) = 0;
  // Records a turn. With `durable`, returns only once it is committed (it then survives a crash
  // of the process); otherwise returns at once and the writer commits it soon after.
  virtual void append(const std::string& tenant, const std::string& session, Turn turn,
                      bool durable) = 0;
};

std::unique_ptr<HistoryStore> make_memory_store();
// Throws std::runtime_error when the file cannot be opened or set up.
std::unique_ptr<HistoryStore> make_sqlite_store(const std::string& path);

}  // namespace chatflow::history
