// The body of POST /v1/sessions: a conversation to keep as a new session of the caller without
// the model answering it (an imported one).
//   {"id": "...", "title": "...", "messages": [{"role": "user", "content": "..."},
//                                             {"role": "assistant", "content": "..."}, ...]}
// `id` and `title` are optional; messages alternate user and assistant from a user message and
// end with an answer: each pair is a turn.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "framework/history/session_import.h"

namespace chatflow::server {

inline constexpr size_t kMaxImportedTurns = 10'000;

struct SessionImportRequest {
  std::string id;     // empty: the server names it
  std::string title;  // empty: from the first message
  std::vector<ImportedTurn> turns;
};

// Throws RequestFailure: 400 naming the member that is wrong.
SessionImportRequest parse_session_import(std::string_view body);

// A new session id for an import that names none ("import-" and 16 hex digits).
std::string new_imported_session_id();

}  // namespace chatflow::server
