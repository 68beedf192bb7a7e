#include "framework/text/bert_words.h"

#include <gtest/gtest.h>

namespace chatflow::text {
namespace {

bool is_ascii_space(char32_t c) {
  return c == U' ' || c == U'\t';
}

TEST(BertWords, PunctuationAndIdeographsStandAloneAndSpacesEndWords) {
  BertSplit split;
  split.is_space = is_ascii_space;
  std::vector<std::u32string> expected = {U"hello",  U",",      U"world", U"!",
                                          U"\u4F60", U"\u597D", U"ok"};
  EXPECT_EQ(split_bert_words(U"hello,  world!\u4F60\u597Dok\t", split), expected);
}

TEST(BertWords, IdeographsStayInTheirWordWhenCjkSplittingIsOff) {
  BertSplit split;
  split.is_space = is_ascii_space;
  split.cjk = false;
  std::vector<std::u32string> expected = {U"a\u4F60b", U"."};
  EXPECT_EQ(split_bert_words(U"a\u4F60b.", split), expected);
}

TEST(BertWords, CharacterClassesFollowBert) {
  EXPECT_TRUE(is_bert_punctuation(U'$'));       // an ASCII symbol counts as punctuation
  EXPECT_TRUE(is_bert_punctuation(U'\u3002'));  // ideographic full stop (Po)
  EXPECT_FALSE(is_bert_punctuation(U'a'));
  EXPECT_FALSE(is_bert_punctuation(U'\u00A9'));  // a non-ASCII symbol does not
  EXPECT_TRUE(is_cjk_ideograph(U'\u4E00'));
  EXPECT_FALSE(is_cjk_ideograph(U'\u3042'));  // hiragana is not an ideograph
  EXPECT_FALSE(is_cjk_ideograph(0x2B820));    // the Rust tokenizers' table starts at 0x2B920
  EXPECT_TRUE(is_cjk_ideograph(0x2B920));
}

}  // namespace
}  // namespace chatflow::text
