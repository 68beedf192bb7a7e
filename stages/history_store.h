// The `history_store` resource: session turns in SQLite (default) or memory.
#pragma once

#include <memory>

#include "framework/history/history_store.h"
#include "framework/api/resource.h"
#include "framework/api/capabilities.h"

namespace chatflow {

class HistoryStoreResource final : public Resource, public HistoryReader {
 public:
  explicit HistoryStoreResource(std::unique_ptr<history::HistoryStore> store)
      : store_(std::move(store)) {}
  history::HistoryStore& store() { return *store_; }
  std::string session_json(const std::string& tenant, const std::string& session) override;

 private:
  std::unique_ptr<history::HistoryStore> store_;
};

}  // namespace chatflow
