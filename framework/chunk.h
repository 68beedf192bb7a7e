// A chunk is one piece of a response stream: a text delta, the token ids it came from, and on
// the last chunk of a stream the reason the stream ended.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace chatflow {

// OpenAI's finish reasons; a failed or cancelled request has an error instead (see Request).
enum class FinishReason { stop, length, content_filter };

std::string_view to_string(FinishReason reason);

struct Chunk {
  std::string text;                    // text delta; may be empty (e.g. the final chunk)
  std::vector<int32_t> token_ids;      // tokens this delta came from
  std::optional<FinishReason> finish;  // set on the last chunk of the stream only

  bool is_final() const { return finish.has_value(); }
};

}  // namespace chatflow
