#include "framework/api/suggest.h"

#include <algorithm>
#include <cctype>

namespace chatflow {
namespace {

// Optimal string alignment distance: Levenshtein plus swaps of neighbouring letters, the most
// common typo ("cdua" is one edit from "cuda").
size_t edit_distance(std::string_view a, std::string_view b) {
  auto same = [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) ==
           std::tolower(static_cast<unsigned char>(y));
  };
  std::vector<std::vector<size_t>> distance(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i)
    distance[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j)
    distance[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      distance[i][j] = std::min({distance[i - 1][j] + 1, distance[i][j - 1] + 1,
                                 distance[i - 1][j - 1] + (same(a[i - 1], b[j - 1]) ? 0 : 1)});
      if (i > 1 && j > 1 && same(a[i - 1], b[j - 2]) && same(a[i - 2], b[j - 1])) {
        distance[i][j] = std::min(distance[i][j], distance[i - 2][j - 2] + 1);
      }
    }
  }
  return distance[a.size()][b.size()];
}

}  // namespace

std::optional<std::string> closest_match(std::string_view word,
                                         const std::vector<std::string>& candidates) {
  // A third of the word's length (at least 2) catches typos and swapped letters without
  // suggesting unrelated names for short words.
  size_t limit = std::max<size_t>(2, word.size() / 3);
  std::optional<std::string> best;
  size_t best_distance = limit + 1;
  for (const auto& candidate : candidates) {
    size_t distance = edit_distance(word, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  if (auto match = closest_match(word, candidates)) return "; did you mean '" + *match + "'?";
  return "";
}

std::string join_names(const std::vector<std::string>& names) {
  if (names.empty()) return "none";
  std::string text;
  for (const auto& name : names) {
    if (!text.empty()) text += ", ";
    text += name;
  }
  return text;
}

}  // namespace chatflow
