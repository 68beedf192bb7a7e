// What the server asks of a history store beside HistoryReader: which branch of a session is
// shown (PATCH /v1/sessions/{id} {"active_turn": N}). The history_store resource implements it;
// the server finds it by dynamic_cast, as it finds HistoryReader.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace chatflow {

// Attached (a bool) by history_trim to a request that asks a turn's question again under the same
// parent (a regeneration, `parent_turn` naming it): the caches leave it to the model, or the
// "new" answer would be the cached one again.
inline constexpr std::string_view kRegenerationAttachment = "history.regeneration";

class SessionBranches {
 public:
  virtual ~SessionBranches() = default;
  enum class Shown { shown, no_session, no_turn };
  // Shows the path through turn `turn` (1..n in the session's order) of the owner's session:
  // GET /v1/sessions/{id} and a request without parent_turn then continue it. Throws
  // std::runtime_error when the store could not write.
  virtual Shown show_turn(const std::string& tenant, const std::string& owner,
                          const std::string& session, int64_t turn) = 0;
};

}  // namespace chatflow
