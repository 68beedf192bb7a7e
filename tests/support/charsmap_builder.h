// Builds a tokenizer.ggml.precompiled_charsmap blob (SentencePiece's XOR-compressed double
// array, see framework/engine/precompiled_charsmap.h) from a table of replacements, so tests
// can make Unigram vocabularies of their own.
#pragma once

#include <map>
#include <string>

namespace chatflow::testing {

// `replacements`: input byte strings (non-empty, no NUL) to what they normalise to.
std::string build_precompiled_charsmap(const std::map<std::string, std::string>& replacements);

}  // namespace chatflow::testing
