// The reasoning/content split, streamed in every way an answer can be cut into pieces: each
// split of the text into two pieces, and one byte at a time, must give the same parts as the
// whole text at once, and those parts are written out by hand.
#include "framework/chat/reasoning_split.h"

#include <gtest/gtest.h>

namespace chatflow::chat {
namespace {

struct Case {
  const char* text;
  bool open_at_start;
  const char* reasoning;
  const char* content;
};

const Case kCases[] = {
    {"<think>plan it</think>\n\nThe answer.", false, "plan it", "The answer."},
    {"  \n<think>\nplan</think>answer", false, "plan", "answer"},
    {"plan it</think>\n\nThe answer.", true, "plan it", "The answer."},
    {"no markers at all", false, "", "no markers at all"},
    {"no markers at all", true, "no markers at all", ""},
    {"a <think> in the middle</think> stays", false, "", "a <think> in the middle</think> stays"},
    {"<think>never closed", false, "never closed", ""},
    {"<think>x < y and </thin k></think>done", false, "x < y and </thin k>", "done"},
    {"<thin", false, "", "<thin"},
    {"<think></think>", false, "", ""},
    {"</think>only content", true, "", "only content"},
};

void expect_parts(const ReasoningSplitter::Pieces& pieces, const Case& c, const std::string& how) {
  EXPECT_EQ(pieces.reasoning, c.reasoning) << how << ": " << c.text;
  EXPECT_EQ(pieces.content, c.content) << how << ": " << c.text;
}

TEST(ReasoningSplit, WholeTextsSplitAsWrittenByHand) {
  for (const Case& c : kCases)
    expect_parts(ReasoningSplitter::split(c.text, c.open_at_start), c, "whole");
}

TEST(ReasoningSplit, EveryCutIntoTwoPiecesGivesTheSameParts) {
  for (const Case& c : kCases) {
    std::string text = c.text;
    for (size_t cut = 0; cut <= text.size(); ++cut) {
      ReasoningSplitter splitter(c.open_at_start);
      ReasoningSplitter::Pieces all;
      for (auto pieces :
           {splitter.push(text.substr(0, cut)), splitter.push(text.substr(cut), true)}) {
        all.reasoning += pieces.reasoning;
        all.content += pieces.content;
      }
      expect_parts(all, c, "cut at " + std::to_string(cut));
    }
  }
}

TEST(ReasoningSplit, ByteByByteReasoningIsReleasedBeforeTheEnd) {
  const std::string text = "<think>step one, step two</think>done";
  ReasoningSplitter splitter(false);
  std::string reasoning, content;
  size_t reasoning_seen_at = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    auto pieces = splitter.push(text.substr(i, 1));
    if (!pieces.reasoning.empty() && reasoning_seen_at == 0) reasoning_seen_at = i;
    reasoning += pieces.reasoning;
    content += pieces.content;
  }
  auto rest = splitter.push("", true);
  EXPECT_EQ(reasoning + rest.reasoning, "step one, step two");
  EXPECT_EQ(content + rest.content, "done");
  // Streamed, not held until the marker: the first reasoning byte leaves as soon as it cannot be
  // part of a marker.
  EXPECT_EQ(reasoning_seen_at, 7u);
}

// Where a model's text enters the stream, each chunk's reasoning moves into its own field; the
// last chunk brings what was held back.
TEST(ReasoningSplit, ChunksCarryTheReasoningInTheirOwnField) {
  ReasoningSplitter splitter(false);
  Chunk undecided = Chunk::delta("  <thi", {1, 2});
  split_reasoning(splitter, undecided);
  EXPECT_EQ(undecided.reasoning, "");
  EXPECT_EQ(undecided.text, "");
  EXPECT_EQ(undecided.token_ids, (std::vector<int32_t>{1, 2}));
  Chunk reasoning = Chunk::delta("nk>plan </thi");
  split_reasoning(splitter, reasoning);
  EXPECT_EQ(reasoning.reasoning, "plan ");
  EXPECT_EQ(reasoning.text, "");
  Chunk last;
  last.finish = FinishReason::length;
  split_reasoning(splitter, last);
  EXPECT_EQ(last.reasoning, "</thi") << "held back, and no marker after all";
  EXPECT_EQ(last.text, "");

  ReasoningSplitter answer_splitter(false);
  Chunk both = Chunk::delta("<think>plan</think>\n\nThe answer");
  split_reasoning(answer_splitter, both);
  EXPECT_EQ(both.reasoning, "plan");
  EXPECT_EQ(both.text, "The answer");
}

}  // namespace
}  // namespace chatflow::chat
