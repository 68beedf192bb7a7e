// The `history_store` resource: session turns in SQLite (default), PostgreSQL or memory, with
// what retention keeps (the newest turns a request loads, how long turns live, how many
// sessions an owner keeps) and a thread sweeping what has gone.
#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <mutex>

#include "framework/api/capabilities.h"
#include "framework/api/resource.h"
#include "framework/history/history_store.h"
#include "framework/history/kept_responses.h"
#include "framework/history/retention_sweeper.h"
#include "framework/history/session_branches.h"
#include "framework/history/session_import.h"

namespace chatflow {

struct HistoryRetention {
  size_t max_turns_loaded = 100;  // a request loads the session's newest turns; 0: all
  history::Retention limits;
  std::chrono::seconds sweep_interval{3600};
};

// What a request continues: the turns of the path to `parent` (questions filled in), the
// newest max_turns_loaded of them, and `parent` itself (0: a new first message).
struct SessionContext {
  std::vector<history::Turn> turns;
  int64_t parent = 0;
  // The questions already answered under `parent` (its children's): a request asking one of
  // them again regenerates that answer.
  std::vector<std::string> answered_here;
};

class HistoryStoreResource final : public Resource,
                                   public HistoryReader,
                                   public StorageHealth,
                                   public SessionBranches,
                                   public SessionImport,
                                   public KeptResponses {
 public:
  // `who` names the resource in the sweeper's log lines.
  explicit HistoryStoreResource(std::unique_ptr<history::HistoryStore> store,
                                HistoryRetention retention = {},
                                const std::string& who = "history_store");
  history::HistoryStore& store() { return *store_; }
  // What a request continues: the path to turn `parent_turn`, or (-1) the path the session
  // shows; nullopt when the session has no turn `parent_turn` (0, a new first message, always
  // exists).
  std::optional<SessionContext> context(const history::SessionKey& key, int64_t parent_turn = -1);
  // Records `turn` (its question in `user`) under turn `parent` (0: a first message); a
  // regenerated question refers to its sibling's text (turn_tree.h). As HistoryStore::append.
  bool append_turn(const history::SessionKey& key, history::Turn turn, int64_t parent,
                   bool durable);
  Shown show_turn(const std::string& tenant, const std::string& owner, const std::string& session,
                  int64_t turn) override;
  std::optional<SessionInfo> import_session(const std::string& tenant, const std::string& owner,
                                            const std::string& session,
                                            const std::vector<ImportedTurn>& turns,
                                            const std::string& title) override;

  void keep_response(const std::string& tenant, const std::string& owner, const std::string& id,
                     const KeptResponse& response) override;
  std::optional<KeptResponse> kept_response(const std::string& tenant, const std::string& owner,
                                            const std::string& id) override {
    return store_->kept_response({tenant, owner, id});
  }
  bool forget_response(const std::string& tenant, const std::string& owner,
                       const std::string& id) override {
    return store_->forget_response({tenant, owner, id});
  }

  std::optional<std::string> session_json(const std::string& tenant, const std::string& owner,
                                          const std::string& session) override;
  std::optional<SessionList> list_sessions(const std::string& tenant, const std::string& owner,
                                           size_t limit, const std::string& after) override;
  bool delete_session(const std::string& tenant, const std::string& owner,
                      const std::string& session) override;
  std::optional<SessionInfo> rename_session(const std::string& tenant, const std::string& owner,
                                            const std::string& session,
                                            const std::string& title) override;
  int64_t delete_sessions(const std::string& tenant, const std::string& owner) override;
  int64_t export_sessions(const std::string& tenant, const std::string& owner,
                          const std::function<void(const std::string& line)>& write) override;
  StorageStatus storage_status() const override {
    return {"history", store_->lost_turns(), store_->last_failure_time()};
  }

 private:
  // Held while a session's turns are read and a turn placed by them is written (append_turn,
  // show_turn, import_session): a turn's links are distances back from its own place, so two
  // answers of one session finishing at once must not both count the same turns. Striped by
  // session. One server's lock: across a fleet the PostgreSQL store moves a placed turn past the
  // turns other replicas appended (Turn::placed_among; docs/caches-and-sessions.md).
  std::mutex& session_lock(const history::SessionKey& key);

  std::unique_ptr<history::HistoryStore> store_;
  HistoryRetention retention_;
  std::array<std::mutex, 64> session_locks_;
  std::unique_ptr<history::RetentionSweeper> sweeper_;  // last: it sweeps store_
};

}  // namespace chatflow
