// The parity text generator: the same text for the same seed, and every kind of piece in it.
#include "support/mixed_script_text.h"

#include <gtest/gtest.h>

#include "framework/text/utf8.h"

namespace chatflow::testing {
namespace {

TEST(MixedScriptText, TheSameSeedGivesTheSameText) {
  EXPECT_EQ(mixed_script_text(20000, 7), mixed_script_text(20000, 7));
  EXPECT_NE(mixed_script_text(20000, 7), mixed_script_text(20000, 8));
  EXPECT_GE(mixed_script_text(100 * 1024).size(), 100u * 1024);
}

TEST(MixedScriptText, CarriesEveryScriptAndInvalidBytes) {
  std::string text = mixed_script_text(100 * 1024);
  for (const char* piece : {"日本語", "مرحبا", "नमस्ते", "👨‍👩‍👧‍👦", "\t", "\r\n",
                            "\xC2\xA0", "e\xCC\x81", "return", "<|endoftext|>"}) {
    EXPECT_NE(text.find(piece), std::string::npos) << piece;
  }
  EXPECT_TRUE(text::first_invalid_byte(text).has_value());
}

}  // namespace
}  // namespace chatflow::testing
