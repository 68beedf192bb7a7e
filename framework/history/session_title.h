// A session's title as a list of sessions shows it: the title its owner gave it, or else the
// first thing the user said, on one line and short enough for a sidebar.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace chatflow::history {

// Code points a title made from a message keeps, the ellipsis included.
inline constexpr size_t kTitleCodePoints = 60;

// `message` with every run of whitespace or control characters (newlines, tabs, Unicode spaces)
// made one space and both ends trimmed, cut to at most `limit` code points (the last one "…"
// when anything was cut). Never splits a code point; an invalid byte becomes U+FFFD.
std::string title_from_message(std::string_view message, size_t limit = kTitleCodePoints);

}  // namespace chatflow::history
