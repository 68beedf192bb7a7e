// The `history_store` resource: session turns in SQLite (default), PostgreSQL or memory.
#pragma once

#include <memory>

#include "framework/api/capabilities.h"
#include "framework/api/resource.h"
#include "framework/history/history_store.h"

namespace chatflow {

class HistoryStoreResource final : public Resource, public HistoryReader, public StorageHealth {
 public:
  explicit HistoryStoreResource(std::unique_ptr<history::HistoryStore> store)
      : store_(std::move(store)) {}
  history::HistoryStore& store() { return *store_; }
  std::optional<std::string> session_json(const std::string& tenant, const std::string& owner,
                                          const std::string& session) override;
  std::optional<SessionList> list_sessions(const std::string& tenant, const std::string& owner,
                                           size_t limit, const std::string& after) override;
  bool delete_session(const std::string& tenant, const std::string& owner,
                      const std::string& session) override;
  std::optional<SessionInfo> rename_session(const std::string& tenant, const std::string& owner,
                                            const std::string& session,
                                            const std::string& title) override;
  StorageStatus storage_status() const override {
    return {"history", store_->lost_turns(), store_->last_failure_time()};
  }

 private:
  std::unique_ptr<history::HistoryStore> store_;
};

}  // namespace chatflow
