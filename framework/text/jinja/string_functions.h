// Python's str operations on tracked strings. Those that only cut and rejoin (strip, split,
// replace, slicing) keep each byte's provenance; those that rewrite characters (upper, lower,
// title) keep it only for a string wholly written by the template.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "framework/text/jinja/tracked_string.h"

namespace chatflow::jinja {

// Decodes one code point at `offset` (invalid bytes decode as themselves) and advances it.
uint32_t next_code_point(std::string_view text, size_t& offset);
bool is_python_space(uint32_t code_point);

enum class StripSide { both, left, right };
// `characters` null: whitespace.
TrackedString strip(const TrackedString& text, const std::string* characters, StripSide side);
// `separator` null: runs of whitespace. max_splits < 0: no limit.
std::vector<TrackedString> split(const TrackedString& text, const std::string* separator,
                                 int64_t max_splits);
std::vector<TrackedString> rsplit(const TrackedString& text, const std::string* separator,
                                  int64_t max_splits);
std::vector<TrackedString> split_lines(const TrackedString& text, bool keep_ends);
TrackedString replace(const TrackedString& text, const std::string& old_text,
                      const TrackedString& new_text, int64_t count);

TrackedString upper(const TrackedString& text);
TrackedString lower(const TrackedString& text);
TrackedString python_title(const TrackedString& text);  // str.title()
TrackedString capitalize(const TrackedString& text);    // str.capitalize()
TrackedString jinja_title(const TrackedString& text);   // the |title filter
bool is_upper(std::string_view text);
// markupsafe's escape(): & < > " ' as entities; the result is Markup. Markup stays as it is.
TrackedString html_escape(const TrackedString& text);
bool is_lower(std::string_view text);

}  // namespace chatflow::jinja
