// Prompt lookup, the draft of n-gram speculative decoding (Saxena's prompt-lookup decoding,
// llama.cpp's llama-lookup, vLLM's ngram speculator): the tokens that followed the latest earlier
// occurrence of the sequence's last n tokens (n from `longest_ngram` down to `shortest_ngram`)
// are guessed to follow again. Answers that quote their prompt (code edits, summaries, RAG,
// extraction) or repeat themselves get several tokens per weight read once the target model has
// verified the guesses in one step.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "framework/engine/vocabulary.h"

namespace chatflow::engine {

struct PromptLookup {
  int64_t max_draft = 0;  // tokens guessed per step at most; 0: off
  int longest_ngram = 3;
  int shortest_ngram = 2;
};

// At most `limit` tokens guessed to follow `tokens` (the prompt and the answer so far); empty when
// no n-gram of the configured lengths occurred earlier.
std::vector<TokenId> lookup_draft(const PromptLookup& lookup, std::span<const TokenId> tokens,
                                  int64_t limit);

}  // namespace chatflow::engine
