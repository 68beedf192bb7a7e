// Prompt lookup's guesses: the tokens after the latest earlier occurrence of the longest n-gram
// the sequence ends with, never more than asked for.
#include "framework/engine/prompt_lookup.h"

#include <gtest/gtest.h>

namespace chatflow::engine {
namespace {

using Tokens = std::vector<TokenId>;

TEST(PromptLookup, GuessesWhatFollowedTheLatestEarlierOccurrence) {
  const PromptLookup lookup{.max_draft = 3, .longest_ngram = 3, .shortest_ngram = 2};
  // "7 8" occurs twice before the end; the later one was followed by 4 5 6.
  const Tokens tokens = {7, 8, 1, 2, 9, 7, 8, 4, 5, 6, 0, 7, 8};
  EXPECT_EQ(lookup_draft(lookup, tokens, 10), (Tokens{4, 5, 6}));
}

TEST(PromptLookup, TheLongestMatchingNgramWins) {
  const PromptLookup lookup{.max_draft = 2, .longest_ngram = 3, .shortest_ngram = 2};
  // The bigram "2 3" last occurred before 9 9, but the trigram "1 2 3" before 5 6.
  const Tokens tokens = {1, 2, 3, 5, 6, 0, 2, 3, 9, 9, 1, 2, 3};
  EXPECT_EQ(lookup_draft(lookup, tokens, 10), (Tokens{5, 6}));
}

TEST(PromptLookup, NeverGuessesMoreThanTheLimitOrWhatFollows) {
  const PromptLookup lookup{.max_draft = 8, .longest_ngram = 2, .shortest_ngram = 2};
  const Tokens tokens = {1, 2, 3, 4, 5, 1, 2};
  EXPECT_EQ(lookup_draft(lookup, tokens, 2), (Tokens{3, 4}));             // the caller's limit
  EXPECT_EQ(lookup_draft(lookup, tokens, 100), (Tokens{3, 4, 5, 1, 2}));  // up to the end
  EXPECT_EQ(lookup_draft(lookup, tokens, 0), Tokens{});
}

TEST(PromptLookup, ARepeatedTokenIsGuessedToRepeat) {
  const PromptLookup lookup{.max_draft = 4, .longest_ngram = 3, .shortest_ngram = 2};
  EXPECT_EQ(lookup_draft(lookup, Tokens{5, 5, 5, 5}, 10), (Tokens{5}));
}

TEST(PromptLookup, NoMatchOrOffGuessesNothing) {
  const PromptLookup lookup{.max_draft = 4, .longest_ngram = 3, .shortest_ngram = 2};
  EXPECT_EQ(lookup_draft(lookup, Tokens{1, 2, 3, 4, 5, 6}, 10), Tokens{});
  EXPECT_EQ(lookup_draft(lookup, Tokens{3}, 10), Tokens{});
  const PromptLookup off{.max_draft = 0};
  EXPECT_EQ(lookup_draft(off, Tokens{1, 2, 1, 2}, 10), Tokens{});
}

}  // namespace
}  // namespace chatflow::engine
