// Looking for markers in text that streams in pieces: a piece's end may be the start of a marker
// the next piece completes (the reasoning split's <think>, tool calls' <tool_call>, a grammar's
// trigger).
#pragma once

#include <algorithm>
#include <string_view>

namespace chatflow::text {

// The thinking block reasoning models write.
inline constexpr std::string_view kThinkingOpens = "<think>";
inline constexpr std::string_view kThinkingCloses = "</think>";

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

// `text` from its first non-space byte on ("" when it is all spaces).
inline std::string_view skip_spaces(std::string_view text) {
  size_t first = 0;
  while (first < text.size() && is_space(text[first]))
    ++first;
  return text.substr(first);
}

}  // namespace chatflow::text
