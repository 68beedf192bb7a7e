// "Did you mean": close typos get a suggestion, unrelated words do not.
#include "framework/api/suggest.h"

#include <gtest/gtest.h>

namespace chatflow {
namespace {

const std::vector<std::string> kTypes = {"exact_cache", "semantic_cache", "rerank",
                                         "decode",      "cuda",           "cpu"};

TEST(Suggest, SwappedLettersCountAsOneEdit) {
  EXPECT_EQ(closest_match("cdua", kTypes), "cuda");
}

TEST(Suggest, MissingAndExtraLetters) {
  EXPECT_EQ(closest_match("exact_cach", kTypes), "exact_cache");
  EXPECT_EQ(closest_match("rerannk", kTypes), "rerank");
  EXPECT_EQ(closest_match("DECODE", kTypes), "decode") << "case does not count";
}

TEST(Suggest, UnrelatedWordsGetNoSuggestion) {
  EXPECT_FALSE(closest_match("tokenizer", kTypes));
  EXPECT_EQ(did_you_mean("moderation", kTypes), "");
}

TEST(Suggest, JoinNames) {
  EXPECT_EQ(join_names({}), "none");
  EXPECT_EQ(join_names({"a", "b"}), "a, b");
}

}  // namespace
}  // namespace chatflow
