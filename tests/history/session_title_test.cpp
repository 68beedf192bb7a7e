// A session's title from its first message: one line, at most 60 code points, never a split
// character.
#include "framework/history/session_title.h"

#include <gtest/gtest.h>

#include "framework/text/utf8.h"

namespace chatflow::history {
namespace {

TEST(SessionTitle, ShortMessagesStayAsTheyAreWithWhitespaceCollapsed) {
  EXPECT_EQ(title_from_message("Tell me a story"), "Tell me a story");
  EXPECT_EQ(title_from_message("  Tell\n\n me \t a\r\nstory  "), "Tell me a story");
  EXPECT_EQ(title_from_message("no\u00a0break\u3000wide\u2028line"), "no break wide line");
  EXPECT_EQ(title_from_message("bell\x07here"), "bell here");
  EXPECT_EQ(title_from_message(" \n\t "), "");
  EXPECT_EQ(title_from_message(std::string(60, 'a')), std::string(60, 'a')) << "60 fit";
}

TEST(SessionTitle, LongMessagesAreCutToSixtyCodePointsWithAnEllipsis) {
  std::string title = title_from_message(std::string(61, 'a'));
  EXPECT_EQ(title, std::string(59, 'a') + "\u2026");
  EXPECT_EQ(text::decode(title).size(), kTitleCodePoints);
  // A space left before the cut goes, so the ellipsis follows a word.
  std::string words = std::string(58, 'a') + " bcdef";
  EXPECT_EQ(title_from_message(words), std::string(58, 'a') + "\u2026");
}

TEST(SessionTitle, TheCutNeverSplitsAMultiByteCharacter) {
  // Two-, three- and four-byte characters alike: the title is valid UTF-8 of 60 code points.
  for (const std::string unit : {"é", "日", "😀"}) {
    std::string message;
    for (int i = 0; i < 100; ++i)
      message += unit;
    std::string title = title_from_message(message);
    EXPECT_FALSE(text::first_invalid_byte(title)) << unit;
    EXPECT_EQ(text::decode(title).size(), kTitleCodePoints) << unit;
    std::string expected;
    for (size_t i = 0; i + 1 < kTitleCodePoints; ++i)
      expected += unit;
    EXPECT_EQ(title, expected + "\u2026") << unit;
  }
  // Mixed widths, cut in the middle of where the bytes would be.
  std::string mixed;
  for (int i = 0; i < 40; ++i)
    mixed += "a日";
  std::string title = title_from_message(mixed);
  EXPECT_FALSE(text::first_invalid_byte(title));
  EXPECT_EQ(text::decode(title).size(), kTitleCodePoints);
}

TEST(SessionTitle, InvalidBytesBecomeReplacementCharacters) {
  std::string title = title_from_message("bad \xff byte");
  EXPECT_EQ(title, "bad \ufffd byte");
  EXPECT_FALSE(text::first_invalid_byte(title));
}

}  // namespace
}  // namespace chatflow::history
