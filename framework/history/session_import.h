// What the server asks of a history store to write a conversation the model did not answer
// (POST /v1/sessions: an imported conversation). The history_store resource implements it; the
// server finds it by dynamic_cast, as it finds HistoryReader.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "framework/api/capabilities.h"

namespace chatflow {

struct ImportedTurn {
  std::string user;
  std::string assistant;
};

class SessionImport {
 public:
  virtual ~SessionImport() = default;
  // Writes `turns` as a new session `session` of the owner, one after another, titled `title`
  // (empty: from its first message); nullopt, writing nothing, when the owner already has a
  // session of that id. Throws std::runtime_error when the store could not write.
  virtual std::optional<SessionInfo> import_session(const std::string& tenant,
                                                    const std::string& owner,
                                                    const std::string& session,
                                                    const std::vector<ImportedTurn>& turns,
                                                    const std::string& title) = 0;
};

}  // namespace chatflow
