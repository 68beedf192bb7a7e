// Text as moderation rules see it: compatibility-decomposed (full-width letters become ASCII,
// ligatures split), case-folded, accents and other marks removed, zero-width and other ignorable
// characters dropped, runs of white space made one space. Every byte of the result remembers
// the byte of the original it came from, so a match can be masked in the original text.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace chatflow::text {

struct NormalizedText {
  std::string text;
  std::vector<size_t> origin;  // per byte of `text`: the offset of its source in the original

  // The original byte range [begin, end) that normalized bytes [from, to) came from.
  std::pair<size_t, size_t> original_span(size_t from, size_t to, std::string_view original) const;
};

NormalizedText normalize(std::string_view text);

}  // namespace chatflow::text
