#include "framework/engine/prompt_lookup.h"

#include <algorithm>

namespace chatflow::engine {

std::vector<TokenId> lookup_draft(const PromptLookup& lookup, std::span<const TokenId> tokens,
                                  int64_t limit) {
  limit = std::min(limit, lookup.max_draft);
  const auto size = static_cast<int64_t>(tokens.size());
  if (limit <= 0) return {};
  for (int64_t n = lookup.longest_ngram; n >= std::max(1, lookup.shortest_ngram); --n) {
    if (size < n + 1) continue;
    const auto tail = tokens.subspan(static_cast<size_t>(size - n));
    // The latest occurrence first: recent text predicts the next tokens best.
    for (int64_t start = size - n - 1; start >= 0; --start) {
      if (!std::equal(tail.begin(), tail.end(), tokens.begin() + start)) continue;
      const int64_t follows = start + n;
      const int64_t count = std::min(limit, size - follows);
      return {tokens.begin() + follows, tokens.begin() + follows + count};
    }
  }
  return {};
}

}  // namespace chatflow::engine
