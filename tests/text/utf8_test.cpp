#include "framework/text/utf8.h"

#include <gtest/gtest.h>

namespace chatflow::text {
namespace {

TEST(Utf8, WellFormedTextHasNoInvalidByte) {
  EXPECT_EQ(first_invalid_byte(""), std::nullopt);
  EXPECT_EQ(first_invalid_byte("plain ascii"), std::nullopt);
  EXPECT_EQ(first_invalid_byte("caf\xC3\xA9 \xE4\xBD\xA0 \xF0\x9F\x98\x80"), std::nullopt);
  EXPECT_EQ(first_invalid_byte("\xF4\x8F\xBF\xBF"), std::nullopt);  // U+10FFFF, the last one
}

TEST(Utf8, FirstInvalidByteFollowsRfc3629) {
  EXPECT_EQ(first_invalid_byte("ab\xFF"), 2u);            // never a lead byte
  EXPECT_EQ(first_invalid_byte("a\x80"), 1u);             // a lone continuation byte
  EXPECT_EQ(first_invalid_byte("x\xC0\x80"), 1u);         // overlong NUL
  EXPECT_EQ(first_invalid_byte("\xE0\x80\x80"), 0u);      // overlong three-byte form
  EXPECT_EQ(first_invalid_byte("ok\xED\xA0\x80"), 2u);    // a UTF-16 surrogate
  EXPECT_EQ(first_invalid_byte("\xF4\x90\x80\x80"), 0u);  // above U+10FFFF
  EXPECT_EQ(first_invalid_byte("\xF5\x80\x80\x80"), 0u);  // no such lead byte
  EXPECT_EQ(first_invalid_byte("end\xE4\xBD"), 3u);       // cut off mid-character
  EXPECT_EQ(first_invalid_byte("\xE4\xBD\xA0\xE4x\xA0"), 3u);
}

TEST(Utf8, RepairReplacesEachInvalidByteAndKeepsTheRest) {
  EXPECT_EQ(repair("ok\xFF"
                   "fine\xC3"),
            "ok\xEF\xBF\xBD"
            "fine\xEF\xBF\xBD");
  EXPECT_EQ(repair("\xE4\xBD\xA0"), "\xE4\xBD\xA0");
  EXPECT_EQ(repair("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(Utf8, DecodeAccountsForEveryByte) {
  std::vector<Codepoint> decoded = decode("a\xC3\xA9\xFF\xE4\xBD\xA0");
  ASSERT_EQ(decoded.size(), 4u);
  EXPECT_EQ(decoded[0].value, U'a');
  EXPECT_EQ(decoded[1].value, 0xE9u);
  EXPECT_EQ(decoded[1].offset, 1u);
  EXPECT_EQ(decoded[1].length, 2u);
  EXPECT_EQ(decoded[2].value, kInvalid);
  EXPECT_EQ(decoded[2].length, 1u);
  EXPECT_EQ(decoded[3].value, 0x4F60u);
  EXPECT_EQ(decoded[3].offset, 4u);
}

TEST(Utf8, CodePointsRoundTrip) {
  EXPECT_EQ(to_code_points("a\xC3\xA9\xFF"), std::u32string(U"a\u00E9\uFFFD"));
  EXPECT_EQ(to_utf8(U"\u4F60\U0001F600"), "\xE4\xBD\xA0\xF0\x9F\x98\x80");
}

TEST(Utf8, CompletePrefixStopsBeforeAnUnfinishedCharacter) {
  EXPECT_EQ(complete_prefix_length("ab"), 2u);
  EXPECT_EQ(complete_prefix_length("a\xE4\xBD"), 1u);
  EXPECT_EQ(complete_prefix_length("a\xE4\xBD\xA0"), 4u);
  EXPECT_EQ(complete_prefix_length("\xF0\x9F\x98"), 0u);
}

}  // namespace
}  // namespace chatflow::text
