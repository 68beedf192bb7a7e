// Retracting text a client was already shown: when output moderation judges an answer unsafe
// after part of it streamed (its provider's verdict comes back while tokens keep flowing), the
// stream ends with finish_reason "content_filter", and its last chunk carries chatflow's
// extension "chatflow": {"retract": {"reason": "content_filter" | "moderation_unavailable"}}:
// the text shown so far is to be removed. An ordinary chunk, not a named SSE event: the
// official OpenAI clients hand a named event to the caller in place of a chunk (openai-node 4
// as `{event, data}`, where code reading `chunk.choices` breaks), while an unknown field in a
// chunk is left alone.
#pragma once

#include <string_view>

namespace chatflow::openai {

// The request annotation a stream stage sets (to the reason) before the stream's last chunk.
inline constexpr std::string_view kRetractAnnotation = "retract";

}  // namespace chatflow::openai
