// chatflow's extension fields of a chat completion that continues a server-side session.
#pragma once

#include <string_view>

namespace chatflow::openai {

// "parent_turn": N (with "session_id"): the request answers under turn N of the session (0: as a
// new first message), beside the turns already there: an edited message or a regenerated
// answer. The parser attaches it to the request as an int64_t under this name; history_trim
// reads it.
inline constexpr std::string_view kParentTurnAttachment = "parent_turn";

}  // namespace chatflow::openai
