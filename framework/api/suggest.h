// "Did you mean ...?" for misspelt names in configuration files and on the command line.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace chatflow {

// The candidate closest to `word` by edit distance, if it is close enough to be a likely typo.
std::optional<std::string> closest_match(std::string_view word,
                                         const std::vector<std::string>& candidates);

// "; did you mean 'x'?" or "" when nothing is close; ready to append to an error message.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

// "a, b, c" (or "none").
std::string join_names(const std::vector<std::string>& names);

}  // namespace chatflow
