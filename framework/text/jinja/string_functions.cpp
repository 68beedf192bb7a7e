#include "framework/text/jinja/string_functions.h"

#include <stdexcept>

#include <utf8proc.h>

#include "framework/text/utf8.h"

namespace chatflow::jinja {

uint32_t next_code_point(std::string_view text, size_t& offset) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  unsigned char lead = byte(offset);
  size_t length = lead < 0x80         ? 1
                  : (lead >> 5) == 6  ? 2
                  : (lead >> 4) == 14 ? 3
                  : (lead >> 3) == 30 ? 4
                                      : 1;
  if (offset + length > text.size()) length = 1;
  uint32_t code_point = lead;
  if (length > 1) {
    code_point = lead & (0x7F >> length);
    for (size_t i = 1; i < length; ++i) {
      if ((byte(offset + i) & 0xC0) != 0x80) {
        length = 1;
        code_point = lead;
        break;
      }
      code_point = (code_point << 6) | (byte(offset + i) & 0x3F);
    }
  }
  offset += length;
  return code_point;
}

bool is_python_space(uint32_t c) {
  return (c >= 9 && c <= 13) || (c >= 28 && c <= 32) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

namespace {

bool in_set(uint32_t code_point, const std::string* characters) {
  if (!characters) return is_python_space(code_point);
  size_t offset = 0;
  while (offset < characters->size()) {
    if (next_code_point(*characters, offset) == code_point) return true;
  }
  return false;
}

// Rewrites every code point; the result keeps provenance only when the input was all template.
template <typename Map>
TrackedString map_code_points(const TrackedString& text, Map map) {
  std::string out;
  out.reserve(text.size());
  const std::string& bytes = text.text();
  size_t offset = 0;
  size_t index = 0;
  while (offset < bytes.size()) {
    text::append(out, map(next_code_point(bytes, offset), index++));
  }
  return text.all_from_template() ? TrackedString::from_template(std::move(out))
                                  : TrackedString::from_data(std::move(out));
}

bool is_cased(uint32_t code_point) {
  auto category = utf8proc_category(static_cast<utf8proc_int32_t>(code_point));
  return category == UTF8PROC_CATEGORY_LU || category == UTF8PROC_CATEGORY_LL ||
         category == UTF8PROC_CATEGORY_LT;
}

uint32_t to_upper(uint32_t c) {
  return static_cast<uint32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c)));
}
uint32_t to_lower(uint32_t c) {
  return static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
}
uint32_t to_title(uint32_t c) {
  return static_cast<uint32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c)));
}

}  // namespace

TrackedString strip(const TrackedString& text, const std::string* characters, StripSide side) {
  const std::string& bytes = text.text();
  size_t begin = 0, end = bytes.size();
  if (side != StripSide::right) {
    while (begin < end) {
      size_t next = begin;
      if (!in_set(next_code_point(bytes, next), characters)) break;
      begin = next;
    }
  }
  if (side != StripSide::left) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(bytes[start]) & 0xC0) == 0x80)
        --start;
      size_t probe = start;
      if (!in_set(next_code_point(bytes, probe), characters)) break;
      end = start;
    }
  }
  return text.slice(begin, end);
}

std::vector<TrackedString> split(const TrackedString& text, const std::string* separator,
                                 int64_t max_splits) {
  std::vector<TrackedString> parts;
  const std::string& bytes = text.text();
  if (separator) {
    if (separator->empty()) throw std::invalid_argument("empty separator");
    size_t start = 0;
    while (max_splits < 0 || static_cast<int64_t>(parts.size()) < max_splits) {
      size_t found = bytes.find(*separator, start);
      if (found == std::string::npos) break;
      parts.push_back(text.slice(start, found));
      start = found + separator->size();
    }
    parts.push_back(text.slice(start, bytes.size()));
    return parts;
  }
  size_t offset = 0;
  while (true) {
    while (offset < bytes.size()) {
      size_t next = offset;
      if (!is_python_space(next_code_point(bytes, next))) break;
      offset = next;
    }
    if (offset >= bytes.size()) break;
    if (max_splits >= 0 && static_cast<int64_t>(parts.size()) >= max_splits) {
      TrackedString rest = strip(text.slice(offset, bytes.size()), nullptr, StripSide::right);
      parts.push_back(std::move(rest));
      break;
    }
    size_t start = offset;
    while (offset < bytes.size()) {
      size_t next = offset;
      if (is_python_space(next_code_point(bytes, next))) break;
      offset = next;
    }
    parts.push_back(text.slice(start, offset));
  }
  return parts;
}

std::vector<TrackedString> rsplit(const TrackedString& text, const std::string* separator,
                                  int64_t max_splits) {
  if (max_splits < 0) return split(text, separator, max_splits);
  std::vector<TrackedString> parts;
  const std::string& bytes = text.text();
  if (!separator) {
    // Whitespace from the right: split all, then rejoin the leftmost pieces.
    std::vector<TrackedString> all = split(text, nullptr, -1);
    if (static_cast<int64_t>(all.size()) <= max_splits + 1) return all;
    size_t keep = all.size() - static_cast<size_t>(max_splits);
    // The head is the text up to the end of piece keep-1, stripped on the left.
    size_t head_end = 0;
    size_t search = 0;
    for (size_t i = 0; i < keep; ++i) {
      size_t found = bytes.find(all[i].text(), search);
      head_end = found + all[i].size();
      search = head_end;
    }
    parts.push_back(strip(text.slice(0, head_end), nullptr, StripSide::left));
    for (size_t i = keep; i < all.size(); ++i)
      parts.push_back(all[i]);
    return parts;
  }
  if (separator->empty()) throw std::invalid_argument("empty separator");
  size_t end = bytes.size();
  std::vector<TrackedString> reversed;
  while (static_cast<int64_t>(reversed.size()) < max_splits) {
    if (end < separator->size()) break;
    size_t found = bytes.rfind(*separator, end - separator->size());
    if (found == std::string::npos) break;
    reversed.push_back(text.slice(found + separator->size(), end));
    end = found;
  }
  reversed.push_back(text.slice(0, end));
  return std::vector<TrackedString>(reversed.rbegin(), reversed.rend());
}

std::vector<TrackedString> split_lines(const TrackedString& text, bool keep_ends) {
  std::vector<TrackedString> lines;
  const std::string& bytes = text.text();
  size_t start = 0, offset = 0;
  while (offset < bytes.size()) {
    size_t line_end = offset;
    uint32_t c = next_code_point(bytes, offset);
    bool is_break = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
                    c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!is_break) continue;
    if (c == '\r' && offset < bytes.size() && bytes[offset] == '\n') ++offset;
    lines.push_back(text.slice(start, keep_ends ? offset : line_end));
    start = offset;
  }
  if (start < bytes.size()) lines.push_back(text.slice(start, bytes.size()));
  return lines;
}

TrackedString replace(const TrackedString& text, const std::string& old_text,
                      const TrackedString& new_text, int64_t count) {
  TrackedString out;
  const std::string& bytes = text.text();
  if (old_text.empty()) {
    // Python inserts the replacement between every character and at both ends.
    size_t offset = 0;
    int64_t done = 0;
    while (true) {
      if (count < 0 || done < count) {
        out.append(new_text);
        ++done;
      }
      if (offset >= bytes.size()) break;
      size_t start = offset;
      next_code_point(bytes, offset);
      out.append_slice(text, start, offset);
    }
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t found = bytes.find(old_text, start);
    if (found == std::string::npos) break;
    out.append_slice(text, start, found);
    out.append(new_text);
    start = found + old_text.size();
    ++done;
  }
  out.append_slice(text, start, bytes.size());
  return out;
}

TrackedString upper(const TrackedString& text) {
  // Python's full case mapping turns the one common expanding letter, ß, into "SS".
  if (text.text().find("\xC3\x9F") != std::string::npos) {
    TrackedString expanded = replace(text, "\xC3\x9F", TrackedString::from_data("SS"), -1);
    if (text.all_from_template()) expanded = TrackedString::from_template(expanded.text());
    return map_code_points(expanded, [](uint32_t c, size_t) { return to_upper(c); });
  }
  return map_code_points(text, [](uint32_t c, size_t) { return to_upper(c); });
}

TrackedString lower(const TrackedString& text) {
  return map_code_points(text, [](uint32_t c, size_t) { return to_lower(c); });
}

TrackedString python_title(const TrackedString& text) {
  bool previous_cased = false;
  return map_code_points(text, [&](uint32_t c, size_t) {
    uint32_t result = c;
    if (is_cased(c)) {
      result = previous_cased ? to_lower(c) : to_title(c);
      previous_cased = true;
    } else {
      previous_cased = false;
    }
    return result;
  });
}

TrackedString capitalize(const TrackedString& text) {
  return map_code_points(
      text, [](uint32_t c, size_t index) { return index == 0 ? to_title(c) : to_lower(c); });
}

TrackedString jinja_title(const TrackedString& text) {
  // Words begin after runs of whitespace, '-', '(', '{', '[' and '<'.
  bool word_start = true;
  return map_code_points(text, [&](uint32_t c, size_t) {
    bool separator = is_python_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    uint32_t result = separator ? c : (word_start ? to_upper(c) : to_lower(c));
    word_start = separator;
    return result;
  });
}

bool is_upper(std::string_view text) {
  bool any_cased = false;
  size_t offset = 0;
  while (offset < text.size()) {
    uint32_t c = next_code_point(text, offset);
    if (!is_cased(c)) continue;
    if (to_upper(c) != c || to_lower(c) == c) {
      if (utf8proc_category(static_cast<utf8proc_int32_t>(c)) != UTF8PROC_CATEGORY_LU) return false;
    }
    any_cased = true;
  }
  return any_cased;
}

TrackedString html_escape(const TrackedString& text) {
  if (text.is_markup()) return text;
  TrackedString out;
  const std::string& bytes = text.text();
  size_t start = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const char* entity = nullptr;
    switch (bytes[i]) {
      case '&':
        entity = "&amp;";
        break;
      case '<':
        entity = "&lt;";
        break;
      case '>':
        entity = "&gt;";
        break;
      case '"':
        entity = "&#34;";
        break;
      case '\'':
        entity = "&#39;";
        break;
      default:
        continue;
    }
    out.append_slice(text, start, i);
    out.append(entity, false);
    start = i + 1;
  }
  out.append_slice(text, start, bytes.size());
  out.set_markup(true);
  return out;
}

bool is_lower(std::string_view text) {
  bool any_cased = false;
  size_t offset = 0;
  while (offset < text.size()) {
    uint32_t c = next_code_point(text, offset);
    if (!is_cased(c)) continue;
    if (utf8proc_category(static_cast<utf8proc_int32_t>(c)) != UTF8PROC_CATEGORY_LL) return false;
    any_cased = true;
  }
  return any_cased;
}

}  // namespace chatflow::jinja
