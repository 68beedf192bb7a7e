// Looking for markers in text that streams in pieces: a piece's end may be the start of a marker
// the next piece completes (reasoning_split's <think>, tool_calls' <tool_call>).
#pragma once

#include <algorithm>
#include <string_view>

namespace chatflow::openai {

inline bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

// The length of the longest suffix of `text` that is a proper prefix of `marker`: text that may
// turn out to be the marker once more arrives.
inline size_t partial_marker(std::string_view text, std::string_view marker) {
  for (size_t length = std::min(text.size(), marker.size() - 1); length > 0; --length) {
    if (text.substr(text.size() - length) == marker.substr(0, length)) return length;
  }
  return 0;
}

}  // namespace chatflow::openai
