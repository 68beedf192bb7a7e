// The `history_store` resource: session turns in SQLite (default), PostgreSQL or memory, with
// what retention keeps (the newest turns a request loads, how long turns live, how many
// sessions an owner keeps) and a thread sweeping what has gone.
#pragma once

#include <chrono>
#include <memory>

#include "framework/api/capabilities.h"
#include "framework/api/resource.h"
#include "framework/history/history_store.h"
#include "framework/history/retention_sweeper.h"

namespace chatflow {

struct HistoryRetention {
  size_t max_turns_loaded = 100;  // a request loads the session's newest turns; 0: all
  history::Retention limits;
  std::chrono::seconds sweep_interval{3600};
};

class HistoryStoreResource final : public Resource, public HistoryReader, public StorageHealth {
 public:
  // `who` names the resource in the sweeper's log lines.
  explicit HistoryStoreResource(std::unique_ptr<history::HistoryStore> store,
                                HistoryRetention retention = {},
                                const std::string& who = "history_store");
  history::HistoryStore& store() { return *store_; }
  // The turns a request gets as its session's history: the newest max_turns_loaded.
  std::vector<history::Turn> context_turns(const history::SessionKey& key);

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
  std::unique_ptr<history::HistoryStore> store_;
  HistoryRetention retention_;
  std::unique_ptr<history::RetentionSweeper> sweeper_;  // last: it sweeps store_
};

}  // namespace chatflow
