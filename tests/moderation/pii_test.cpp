#include "framework/moderation/pii.h"

#include <gtest/gtest.h>

namespace chatflow::moderation {
namespace {

std::vector<std::string> found(const std::string& text) {
  std::vector<std::string> out;
  for (const auto& match : find_pii(text, PiiDetectors{}))
    out.push_back(std::string(to_string(match.kind)) + ":" +
                  text.substr(match.begin, match.end - match.begin));
  return out;
}

TEST(Pii, LuhnAndIdentityChecksums) {
  EXPECT_TRUE(luhn_valid("4539 1488 0343 6467"));
  EXPECT_TRUE(luhn_valid("79927398713"));
  EXPECT_FALSE(luhn_valid("4539 1488 0343 6468"));
  EXPECT_FALSE(luhn_valid("1234567812345678"));
  EXPECT_TRUE(cn_id_valid("11010519491231002X"));  // the standard's own example
  EXPECT_TRUE(cn_id_valid("11010519491231002x"));
  EXPECT_FALSE(cn_id_valid("110105194912310021"));
  EXPECT_FALSE(cn_id_valid("11010519491331002X"));  // month 13
}

TEST(Pii, FindsEachKind) {
  EXPECT_EQ(found("call 13800138000 today"), std::vector<std::string>{"phone:13800138000"});
  EXPECT_EQ(found("call +86 138 0013 8000."), std::vector<std::string>{"phone:+86 138 0013 8000"});
  EXPECT_EQ(found("office +44 20 7946 0958, ask"),
            std::vector<std::string>{"phone:+44 20 7946 0958"});
  EXPECT_EQ(found("card 4539-1488-0343-6467 ok"),
            std::vector<std::string>{"card:4539-1488-0343-6467"});
  EXPECT_EQ(found("mail bob.smith+x@example.co.uk now"),
            std::vector<std::string>{"email:bob.smith+x@example.co.uk"});
  EXPECT_EQ(found("身份证11010519491231002X。"),
            std::vector<std::string>{"cn_id:11010519491231002X"});
}

TEST(Pii, LeavesOrdinaryNumbersAlone) {
  EXPECT_TRUE(found("order 1234 5678 9012 3456 shipped").empty());  // fails Luhn
  EXPECT_TRUE(found("in 2024 we sold 12000 units").empty());
  EXPECT_TRUE(found("version 10.2.3, build 20240101").empty());
  EXPECT_TRUE(found("23800138000123").empty());  // digits too long for a mobile number
}

}  // namespace
}  // namespace chatflow::moderation
