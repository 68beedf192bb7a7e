// A string that remembers which of its bytes the template itself wrote. Only those bytes may later
// become control tokens, so text from a request that spells "<|im_start|>" stays text however the
// template slices, joins or concatenates it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace chatflow::jinja {

// [begin, end) byte offsets.
using ByteRange = std::pair<size_t, size_t>;

class TrackedString {
 public:
  TrackedString() = default;
  // Every byte written by the template (literal text, string literals, bos/eos tokens).
  static TrackedString from_template(std::string text);
  // No byte written by the template (request data and anything computed from it).
  static TrackedString from_data(std::string text);

  const std::string& text() const { return text_; }
  const std::vector<ByteRange>& template_ranges() const { return template_ranges_; }
  size_t size() const { return text_.size(); }
  bool empty() const { return text_.empty(); }
  // True when every byte came from the template (an empty string counts).
  bool all_from_template() const;

  void append(const TrackedString& other);
  void append(std::string_view text, bool from_template);
  // Bytes [begin, end) of this string, keeping their provenance.
  void append_slice(const TrackedString& source, size_t begin, size_t end);
  TrackedString slice(size_t begin, size_t end) const;

  std::string take_text() { return std::move(text_); }

  // markupsafe's Markup (what |safe and |escape return): adding plain text to it escapes that
  // text. Slicing and appending do not carry the mark; the operations that do set it.
  bool is_markup() const { return markup_; }
  void set_markup(bool markup) { markup_ = markup; }

 private:
  void mark(size_t begin, size_t end);

  std::string text_;
  std::vector<ByteRange> template_ranges_;  // sorted, disjoint, never adjacent
  bool markup_ = false;
};

}  // namespace chatflow::jinja
