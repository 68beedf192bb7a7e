#include "framework/cache/semantic_index.h"

#include <gtest/gtest.h>

#include "framework/embedding/embedder.h"

namespace chatflow::cache {
namespace {

std::shared_ptr<const CachedAnswer> answer(const std::string& text) {
  auto cached = std::make_shared<CachedAnswer>();
  cached->chunks = {Chunk::delta(text)};
  cached->expires = std::chrono::steady_clock::now() + std::chrono::hours(1);
  return cached;
}

TEST(SemanticIndex, FindsNeighboursWithinAPartitionOnly) {
  auto embedder = embedding::make_ngram_embedder(256, 3);
  SemanticIndex index(256, 1000);
  index.insert("tenant-a", {embedder->embed("how do I reset my router password"),
                            "how do I reset my router password", answer("unplug it")});
  index.insert("tenant-a",
               {embedder->embed("what is the capital of france"), "capital", answer("Paris")});
  auto found =
      index.search("tenant-a", "", embedder->embed("How do I reset my router password?"), 2);
  ASSERT_EQ(found.size(), 2u);
  EXPECT_NEAR(found[0].similarity, 1.0f, 1e-4);
  EXPECT_EQ(found[0].entry->answer->chunks[0].text, "unplug it");
  EXPECT_LT(found[1].similarity, 0.5f);
  EXPECT_TRUE(
      index.search("tenant-b", "", embedder->embed("how do I reset my router password"), 2).empty())
      << "another tenant's partition is empty";
}

TEST(SemanticIndex, EvictsTheOldestAndForgetsOnRequest) {
  auto embedder = embedding::make_ngram_embedder(64, 3);
  SemanticIndex index(64, 3);
  for (int i = 0; i < 5; ++i) {
    std::string text =
        "question number " + std::to_string(i) + " about topic " + std::string(1, char('a' + i));
    index.insert("p", {embedder->embed(text), text, answer(std::to_string(i))});
  }
  EXPECT_EQ(index.size("p"), 3u) << "a partition keeps max_entries";
  auto oldest = index.search("p", "", embedder->embed("question number 0 about topic a"), 3);
  for (const auto& match : oldest)
    EXPECT_NE(match.entry->answer->chunks[0].text, "0");
  auto near = embedder->embed("question number 4 about topic e");
  EXPECT_EQ(index.forget("p", "", &near, 0.99f), 1u);
  EXPECT_EQ(index.size("p"), 2u);
  EXPECT_EQ(index.forget("p", "", nullptr, 0), 2u);
  EXPECT_EQ(index.size("p"), 0u);
}

TEST(SemanticIndex, GrowsPastItsFirstCapacity) {
  auto embedder = embedding::make_ngram_embedder(32, 3);
  SemanticIndex index(32, 5000);
  for (int i = 0; i < 3000; ++i) {
    std::string text = "entry " + std::to_string(i);
    index.insert("p", {embedder->embed(text), text, answer(text)});
  }
  EXPECT_EQ(index.size("p"), 3000u);
  auto found = index.search("p", "", embedder->embed("entry 2999"), 1);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].entry->answer->chunks[0].text, "entry 2999");
}

// A later question is kept under its context (the digest of the turns before it) and found only
// by a search of that context; first questions (no context) only by a search without one.
TEST(SemanticIndex, LaterQuestionsMeetOnlyTheirOwnContext) {
  auto embedder = embedding::make_ngram_embedder(256, 3);
  SemanticIndex index(256, 1000);
  auto then = embedder->embed("And then what?");
  index.insert("p", {then, "And then what?", answer("the dragon slept"), "dragon-story"});
  index.insert("p", {then, "And then what?", answer("the knight rode home"), "knight-story"});
  index.insert("p", {then, "And then what?", answer("first question")});
  EXPECT_EQ(index.size("p"), 3u);

  auto dragon = index.search("p", "dragon-story", then, 4);
  ASSERT_EQ(dragon.size(), 1u);
  EXPECT_EQ(dragon[0].entry->answer->chunks[0].text, "the dragon slept");
  EXPECT_NEAR(dragon[0].similarity, 1.0f, 1e-4);
  auto first = index.search("p", "", then, 4);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].entry->answer->chunks[0].text, "first question");
  EXPECT_TRUE(index.search("p", "princess-story", then, 4).empty());

  // A correction names its context; forgetting everything takes every context.
  EXPECT_EQ(index.forget("p", "knight-story", &then, 0.99f), 1u);
  EXPECT_TRUE(index.search("p", "knight-story", then, 4).empty());
  EXPECT_EQ(index.search("p", "dragon-story", then, 4).size(), 1u);
  EXPECT_EQ(index.forget("p", "", nullptr, 0), 2u);
  EXPECT_TRUE(index.search("p", "dragon-story", then, 4).empty());
}

// Follow-up entries count towards max_entries and are evicted oldest first like the others.
TEST(SemanticIndex, EvictsFollowUpsOldestFirst) {
  auto embedder = embedding::make_ngram_embedder(64, 3);
  SemanticIndex index(64, 2);
  auto why = embedder->embed("Why?");
  index.insert("p", {why, "Why?", answer("1"), "context-1"});
  index.insert("p", {why, "Why?", answer("2"), "context-2"});
  index.insert("p", {why, "Why?", answer("3")});
  EXPECT_EQ(index.size("p"), 2u);
  EXPECT_TRUE(index.search("p", "context-1", why, 4).empty());
  EXPECT_EQ(index.search("p", "context-2", why, 4).size(), 1u);
  EXPECT_EQ(index.search("p", "", why, 4).size(), 1u);
}

}  // namespace
}  // namespace chatflow::cache
