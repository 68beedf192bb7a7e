// The semantic_cache stage in front of echo. Echo repeats each question in its own words, so an
// answer from the cache is told by its text: the paraphrase gets the first question's words back.
// The embedder is the default one (hashed n-grams); the pairs are README's measured examples.
#include <fstream>

#include <gtest/gtest.h>

#include "framework/embedding/embedder.h"
#include "support/pipeline_helpers.h"
#include "support/temp_model.h"

namespace chatflow::testing {
namespace {

// Without the built-in bypass list unless a test is about it: compiling that list takes about
// half a second per pipeline.
std::unique_ptr<Pipeline> cached_echo(
    const std::string& cache_config = "{threshold: 0.9, built_in_bypass: false}") {
  return build_yaml(
      "version: 1\nstages:\n  - {name: semantic, type: semantic_cache, config: " + cache_config +
          "}\n  - {name: echo, type: echo}\n  - {name: emit, type: sse_emit}\n"
          "edges:\n  - semantic.hit -> emit\n",
      builtin_registry());
}

struct Asked {
  std::shared_ptr<Request> request;
  std::string text;

  std::optional<std::string> header(const std::string& name) const {
    for (const auto& [field, value] : request->response_headers()) {
      if (field == name) return value;
    }
    return std::nullopt;
  }
  bool hit() const { return header("x-chatflow-cache") == "semantic"; }
};

Asked ask(Pipeline& pipeline, const std::string& question, const std::string& tenant = "tenant-a",
          const std::string& system = "", int64_t max_tokens = 12, const std::string& user = "") {
  std::shared_ptr<CollectingSink> sink;
  auto request = user_request(question, sink);
  if (!system.empty()) request->messages.insert(request->messages.begin(), {"system", system});
  request->model = "test-model";
  request->identity.tenant = tenant;
  request->identity.user = user;
  request->generation.temperature = 0.7f;  // sampled: the semantic cache still answers
  request->generation.max_tokens = max_tokens;
  EXPECT_EQ(pipeline.submit(request), Admission::accepted);
  EXPECT_TRUE(sink->wait());
  return {request, sink->text()};
}

// The embedder's cosine for two questions: the pairs below must be above the threshold, so
// that what turns them away is the verifier, not the distance.
float cosine(const std::string& a, const std::string& b) {
  auto embedder = embedding::make_ngram_embedder(256, 3);
  return embedding::dot(embedder->embed(a), embedder->embed(b));
}

TEST(SemanticCache, AParaphraseIsAnsweredWithTheFirstAnswerAndItsSimilarity) {
  auto pipeline = cached_echo();
  ASSERT_TRUE(pipeline);
  Asked first = ask(*pipeline, "What is the router password?");
  EXPECT_FALSE(first.hit());
  EXPECT_EQ(first.text, "What is the router password?");

  Asked paraphrase = ask(*pipeline, "what is the router's password");
  ASSERT_FALSE(paraphrase.request->error()) << paraphrase.request->error()->message;
  EXPECT_TRUE(paraphrase.hit());
  EXPECT_EQ(paraphrase.text, "What is the router password?") << "echo answered, not the cache";
  EXPECT_EQ(paraphrase.request->annotation("cache"), "semantic");
  std::optional<std::string> similarity = paraphrase.header("x-chatflow-cache-similarity");
  ASSERT_TRUE(similarity);
  EXPECT_EQ(similarity->size(), 6u) << "four decimals: " << *similarity;
  EXPECT_GE(std::stod(*similarity), 0.9);
  EXPECT_LT(std::stod(*similarity), 1.0);
  EXPECT_EQ(paraphrase.request->finish_reason(), FinishReason::stop);
}

TEST(SemanticCache, NegationNeverGetsTheAffirmativeAnswer) {
  const std::string safe = "Is the old bridge on Main Street safe for trucks?";
  const std::string not_safe = "Is the old bridge on Main Street not safe for trucks?";
  ASSERT_GE(cosine(safe, not_safe), 0.9f);
  auto pipeline = cached_echo();
  ASSERT_TRUE(pipeline);
  ask(*pipeline, safe);
  ASSERT_TRUE(ask(*pipeline, safe).hit()) << "the original was not cached";
  Asked negated = ask(*pipeline, not_safe);
  EXPECT_FALSE(negated.hit());
  EXPECT_EQ(negated.text, not_safe);
}

TEST(SemanticCache, AnotherNumberNeverGetsTheAnswer) {
  const std::string three = "How many vacation days do employees get in their first 3 years?";
  const std::string five = "How many vacation days do employees get in their first 5 years?";
  ASSERT_GE(cosine(three, five), 0.9f);
  auto pipeline = cached_echo();
  ASSERT_TRUE(pipeline);
  ask(*pipeline, three);
  ASSERT_TRUE(ask(*pipeline, three).hit());
  Asked changed = ask(*pipeline, five);
  EXPECT_FALSE(changed.hit());
  EXPECT_EQ(changed.text, five);
}

TEST(SemanticCache, AnotherTenantOrNoTenantNeverGetsTheAnswer) {
  auto pipeline = cached_echo();
  ASSERT_TRUE(pipeline);
  ask(*pipeline, "What is the router password?", "tenant-a");
  Asked other = ask(*pipeline, "what is the router's password", "tenant-b");
  EXPECT_FALSE(other.hit());
  EXPECT_EQ(other.text, "what is the router's password") << "tenant B got tenant A's answer";

  // Without an authenticated tenant there is no partition: nothing is looked up or kept.
  Asked anonymous = ask(*pipeline, "what is the router's password", "");
  EXPECT_FALSE(anonymous.hit());
  EXPECT_EQ(anonymous.text, "what is the router's password");
  EXPECT_EQ(anonymous.request->annotation("semantic_cache"), "bypass");
  ask(*pipeline, "Where is the spare key?", "");
  EXPECT_EQ(ask(*pipeline, "where is the spare key", "").text, "where is the spare key");
}

// With scope: user (the default) a paraphrase from another user of the tenant misses; with
// scope: tenant it hits.
TEST(SemanticCache, AnAnswerCrossesUsersOfATenantOnlyWithScopeTenant) {
  auto per_user = cached_echo();
  ASSERT_TRUE(per_user);
  ask(*per_user, "What is my account balance?", "tenant-a", "", 12, "alice");
  EXPECT_FALSE(ask(*per_user, "what is my account's balance", "tenant-a", "", 12, "bob").hit());
  EXPECT_TRUE(ask(*per_user, "what is my account's balance", "tenant-a", "", 12, "alice").hit());

  auto shared = cached_echo("{threshold: 0.9, built_in_bypass: false, scope: tenant}");
  ASSERT_TRUE(shared);
  ask(*shared, "What is my account balance?", "tenant-a", "", 12, "alice");
  EXPECT_TRUE(ask(*shared, "what is my account's balance", "tenant-a", "", 12, "bob").hit());
}

TEST(SemanticCache, TheSystemPromptAndMaxTokensArePartOfThePartition) {
  auto pipeline = cached_echo();
  ASSERT_TRUE(pipeline);
  ask(*pipeline, "Where is the spare key?", "tenant-a", "Answer in French.");
  EXPECT_FALSE(ask(*pipeline, "where is the spare key", "tenant-a", "Answer in German.").hit());
  EXPECT_FALSE(ask(*pipeline, "where is the spare key", "tenant-a", "Answer in French.",
                   /*max_tokens=*/3)
                   .hit())
      << "a smaller max_tokens was given a longer answer";
  Asked same = ask(*pipeline, "where is the spare key", "tenant-a", "Answer in French.");
  EXPECT_TRUE(same.hit());
  EXPECT_EQ(same.text, "Where is the spare key?");
}

TEST(SemanticCache, TimeDependentQuestionsBypassTheCache) {
  auto pipeline = cached_echo("{threshold: 0.9}");
  ASSERT_TRUE(pipeline);
  ask(*pipeline, "What is the weather like in the mountains?");
  Asked again = ask(*pipeline, "what is the weather like in the mountains");
  EXPECT_FALSE(again.hit());
  EXPECT_EQ(again.text, "what is the weather like in the mountains");
  EXPECT_EQ(again.request->annotation("semantic_cache"), "bypass");

  // Without the built-in list the same pair is cached; a listed phrase bypasses instead.
  std::string list = temp_path("semantic-bypass.txt");
  std::ofstream(list) << "stock level\n";
  auto configured =
      cached_echo("{threshold: 0.9, built_in_bypass: false, bypass: [\"" + list + "\"]}");
  ASSERT_TRUE(configured);
  ask(*configured, "What is the weather like in the mountains?");
  EXPECT_TRUE(ask(*configured, "what is the weather like in the mountains").hit());
  ask(*configured, "What is the stock level of the blue widgets?");
  Asked listed = ask(*configured, "what is the stock level of the blue widgets");
  EXPECT_FALSE(listed.hit());
  EXPECT_EQ(listed.request->annotation("semantic_cache"), "bypass");
}

}  // namespace
}  // namespace chatflow::testing
