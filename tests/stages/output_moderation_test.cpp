// The output_moderation stage after echo: echo streams the text word by word, so a phone number
// or card number arrives split over several chunks, as a model would send it.
#include <fstream>

#include <gtest/gtest.h>

#include "support/pipeline_helpers.h"
#include "support/temp_model.h"

namespace chatflow::testing {
namespace {

std::unique_ptr<Pipeline> guarded_echo(const std::string& guard_config) {
  return build_yaml(
      "version: 1\nstages:\n  - {name: echo, type: echo, config: {words_per_chunk: 1}}\n"
      "  - {name: guard, type: output_moderation, config: " +
          guard_config + "}\n",
      builtin_registry());
}

TEST(OutputModeration, MasksPersonalDataSplitAcrossChunks) {
  auto pipeline = guarded_echo("{}");
  ASSERT_TRUE(pipeline);
  // "138 0013 8000" arrives as three chunks; so does the card number (four).
  EXPECT_EQ(run_text(*pipeline, "call me at 138 0013 8000 tonight"),
            "call me at [redacted] tonight");
  EXPECT_EQ(run_text(*pipeline, "ring +86 138 0013 8000 now"), "ring [redacted] now");
  EXPECT_EQ(run_text(*pipeline, "my card is 4539 1488 0343 6467 ok"), "my card is [redacted] ok");
  EXPECT_EQ(run_text(*pipeline, "order 1234 5678 9012 3456 shipped"),
            "order 1234 5678 9012 3456 shipped")
      << "a Luhn-invalid number is not a card";
  EXPECT_EQ(run_text(*pipeline, "write to bob@example.com please"), "write to [redacted] please");
}

TEST(OutputModeration, HoldsBackOnlyTheWindow) {
  auto pipeline = guarded_echo("{window_chars: 8}");
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = user_request("aaaa bbbb cccc dddd eeee ffff", sink);
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  // Text leaves as soon as more than 8 characters follow it; nothing is lost or reordered.
  EXPECT_EQ(sink->text(), "aaaa bbbb cccc dddd eeee ffff");
  // Chunks in: "aaaa", " bbbb", " cccc", ... Out: nothing until more than 8 characters are
  // held, then each chunk releases exactly what is more than 8 characters old.
  std::vector<std::string> out;
  for (const auto& chunk : sink->chunks())
    out.push_back(chunk.text);
  EXPECT_EQ(out, (std::vector<std::string>{"a", "aaa b", "bbb c", "ccc d", "ddd e", "eee ffff"}));
}

TEST(OutputModeration, AbortEndsTheStreamWithContentFilter) {
  std::string list = write_temp_file("abort-list.txt", "build a bomb\n");
  auto pipeline = guarded_echo("{lists: {" + list + ": abort}, notice: ' [stopped]'}");
  ASSERT_TRUE(pipeline);
  std::shared_ptr<Request> request;
  std::string text =
      run_text(*pipeline, "first I will BUILD A B-O-M-B and then more words", &request);
  EXPECT_EQ(text, "first I will  [stopped]");
  EXPECT_EQ(request->finish_reason(), FinishReason::content_filter);
  EXPECT_EQ(request->annotation("output_moderation"), "aborted:abort-list");
}

TEST(OutputModeration, MasksBlockListPhrases) {
  std::string list = write_temp_file("mask-list.txt", "build a bomb\n");
  auto pipeline = guarded_echo("{lists: {" + list + ": mask}, pii: []}");
  ASSERT_TRUE(pipeline);
  EXPECT_EQ(run_text(*pipeline, "never Build A Bomb ok"), "never [redacted] ok");
}

}  // namespace
}  // namespace chatflow::testing
