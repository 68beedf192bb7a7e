// The exact_cache stage in front of echo, with a counting stage on the miss path: a hit must
// answer without reaching echo, streamed through the same stream stages (`exact.hit -> emit`).
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include "framework/api/capabilities.h"
#include "support/pipeline_helpers.h"
#include "support/temp_model.h"
#include "support/test_stages.h"

namespace chatflow::testing {
namespace {

// The built-in types plus the test types (`pass` counts the requests that miss).
Registry builtin_and_test_types(std::shared_ptr<TestProbe> probe) {
  Registry registry = builtin_registry();
  Registry test_types = test_registry(std::move(probe));
  for (const auto& name : test_types.stage_names())
    registry.add(*test_types.find_stage(name));
  return registry;
}

class ExactCache : public ::testing::Test {
 protected:
  // exact -> missed (counts) -> echo -> [between] -> emit; exact.hit -> the stage after echo.
  std::unique_ptr<Pipeline> cached_echo(const std::string& cache_config = "{}",
                                        const std::string& between = "",
                                        const std::string& hit_target = "emit") {
    return build_yaml(
        "version: 1\nstages:\n  - {name: exact, type: exact_cache, config: " + cache_config +
            "}\n  - {name: missed, type: pass}\n"
            "  - {name: echo, type: echo, config: {words_per_chunk: 2}}\n" +
            between + "  - {name: emit, type: sse_emit}\nedges:\n  - exact.hit -> " + hit_target +
            "\n",
        registry_);
  }

  struct Asked {
    std::shared_ptr<Request> request;
    std::string text;
    std::vector<std::string> chunks;
    std::string cache;  // the x-chatflow-cache response header
  };

  // Asks greedily as `tenant`; `change` adjusts the request before it is submitted.
  Asked ask(Pipeline& pipeline, const std::string& text, const std::string& tenant = "tenant-a",
            const std::function<void(Request&)>& change = nullptr) {
    std::shared_ptr<CollectingSink> sink;
    auto request = user_request(text, sink);
    request->model = "test-model";
    request->identity.tenant = tenant;
    request->generation.temperature = 0;
    request->generation.max_tokens = 12;
    if (change) change(*request);
    EXPECT_EQ(pipeline.submit(request), Admission::accepted);
    EXPECT_TRUE(sink->wait());
    Asked asked{request, sink->text(), {}, ""};
    for (const auto& chunk : sink->chunks())
      asked.chunks.push_back(chunk.text);
    for (const auto& [name, value] : request->response_headers()) {
      if (name == "x-chatflow-cache") asked.cache = value;
    }
    return asked;
  }

  int misses() const { return probe_->calls("missed"); }

  std::shared_ptr<TestProbe> probe_ = std::make_shared<TestProbe>();
  Registry registry_ = builtin_and_test_types(probe_);
};

TEST_F(ExactCache, ARepeatedGreedyQuestionIsAnsweredFromTheCache) {
  auto pipeline = cached_echo();
  ASSERT_TRUE(pipeline);
  Asked first = ask(*pipeline, "Tell me about the lighthouse keeper.");
  EXPECT_EQ(first.cache, "miss");
  EXPECT_EQ(first.text, "Tell me about the lighthouse keeper.");
  EXPECT_FALSE(first.request->annotation("cache"));
  ASSERT_EQ(misses(), 1);

  Asked second = ask(*pipeline, "Tell me about the lighthouse keeper.");
  ASSERT_FALSE(second.request->error()) << second.request->error()->message;
  EXPECT_EQ(second.cache, "exact");
  EXPECT_EQ(second.request->annotation("cache"), "exact");
  EXPECT_EQ(misses(), 1) << "the hit went on to echo";
  EXPECT_EQ(second.text, first.text);
  EXPECT_EQ(second.chunks, first.chunks) << "a hit streams in the shape first sent";
  EXPECT_EQ(second.request->finish_reason(), FinishReason::stop);
}

TEST_F(ExactCache, AnotherTenantNeverGetsTheCachedAnswer) {
  auto pipeline = cached_echo();
  ASSERT_TRUE(pipeline);
  ask(*pipeline, "What is our launch date?", "tenant-a");
  Asked other = ask(*pipeline, "What is our launch date?", "tenant-b");
  EXPECT_EQ(other.cache, "miss");
  EXPECT_EQ(misses(), 2);
  EXPECT_EQ(ask(*pipeline, "What is our launch date?", "tenant-b").cache, "exact")
      << "tenant B's own answer was not kept";
  EXPECT_EQ(ask(*pipeline, "What is our launch date?", "tenant-a").cache, "exact");
  EXPECT_EQ(misses(), 2);
}

// scope: user (the default) keeps one user's answers from another user of the same tenant: a
// private answer never crosses users. A caller without a user shares the tenant's answers, and
// scope: tenant shares them all.
TEST_F(ExactCache, AnAnswerCrossesUsersOfATenantOnlyWithScopeTenant) {
  auto as_user = [](const std::string& user) {
    return [user](Request& request) { request.identity.user = user; };
  };
  const std::string question = "What is on my calendar?";
  auto private_cache = cached_echo();
  ASSERT_TRUE(private_cache);
  ask(*private_cache, question, "tenant-a", as_user("alice"));
  EXPECT_EQ(ask(*private_cache, question, "tenant-a", as_user("bob")).cache, "miss");
  EXPECT_EQ(ask(*private_cache, question, "tenant-a", as_user("alice")).cache, "exact");
  ask(*private_cache, question, "tenant-a");
  EXPECT_EQ(ask(*private_cache, question, "tenant-a").cache, "exact") << "no user: the tenant's";

  auto shared_cache = cached_echo("{scope: tenant}");
  ASSERT_TRUE(shared_cache);
  ask(*shared_cache, question, "tenant-a", as_user("alice"));
  EXPECT_EQ(ask(*shared_cache, question, "tenant-a", as_user("bob")).cache, "exact");
}

TEST_F(ExactCache, AChangedParameterMessageOrModelMisses) {
  auto pipeline = cached_echo();
  ASSERT_TRUE(pipeline);
  const std::string question = "What does the old clock tower chime at noon?";
  ASSERT_EQ(ask(*pipeline, question).cache, "miss");
  const std::vector<std::pair<std::string, std::function<void(Request&)>>> changes = {
      {"max_tokens", [](Request& r) { r.generation.max_tokens = 11; }},
      {"seed", [](Request& r) { r.generation.seed = 7; }},
      {"stop", [](Request& r) { r.generation.stop = {"zzz"}; }},
      {"top_k", [](Request& r) { r.generation.top_k = 5; }},
      {"model", [](Request& r) { r.model = "another-model"; }},
      {"message", [](Request& r) { r.messages[0].content += "!"; }},
      {"system prompt",
       [](Request& r) {
         r.messages.insert(r.messages.begin(), {"system", "Be brief."});
       }},
  };
  for (const auto& [what, change] : changes) {
    int before = misses();
    Asked asked = ask(*pipeline, question, "tenant-a", change);
    EXPECT_EQ(asked.cache, "miss") << "a changed " << what << " hit the cache";
    EXPECT_EQ(misses(), before + 1) << what;
  }
  // `stream` does not change the answer: a non-streamed repeat still hits.
  Asked unstreamed = ask(*pipeline, question, "tenant-a", [](Request& r) { r.stream = false; });
  EXPECT_EQ(unstreamed.cache, "exact");
}

// chat_template_kwargs change what the template renders (enable_thinking: false drops the
// thinking), so they are part of the key; as JSON, whatever the order of its keys and the space
// between them.
TEST_F(ExactCache, ChatTemplateKwargsArePartOfTheKeyInAnyKeyOrder) {
  auto pipeline = cached_echo();
  ASSERT_TRUE(pipeline);
  const std::string question = "Think about the tide tables.";
  auto kwargs = [](std::string text) {
    return [text](Request& r) { r.chat_template_kwargs = text; };
  };
  ASSERT_EQ(ask(*pipeline, question, "tenant-a", kwargs(R"({"enable_thinking":true,"x":1})")).cache,
            "miss");
  int before = misses();
  EXPECT_EQ(
      ask(*pipeline, question, "tenant-a", kwargs(R"({"enable_thinking":false,"x":1})")).cache,
      "miss")
      << "another enable_thinking got the cached answer";
  EXPECT_EQ(ask(*pipeline, question, "tenant-a").cache, "miss") << "no kwargs at all";
  EXPECT_EQ(misses(), before + 2);
  EXPECT_EQ(
      ask(*pipeline, question, "tenant-a", kwargs(R"({ "x": 1, "enable_thinking": true })")).cache,
      "exact")
      << "the same kwargs in another order are the same request";
  EXPECT_EQ(misses(), before + 2);
}

// exact_cache -> the model stages, for answers that really end with "length".
std::unique_ptr<Pipeline> cached_model() {
  engine::ModelShape shape;
  shape.ffn = 96;
  shape.context = 256;
  shape.type = kernels::TensorType::q8_0;
  return build_yaml("version: 1\nresources:\n  llm: {type: gguf_model, path: \"" +
                        temp_model(shape) +
                        "\"}\nstages:\n  - {name: exact, type: exact_cache}\n"
                        "  - {name: tokenize, type: tokenize, config: {model: llm}}\n"
                        "  - {name: prefill, type: prefill, config: {model: llm}}\n"
                        "  - {name: decode, type: decode, config: {model: llm}}\n"
                        "  - {name: detokenize, type: detokenize, config: {model: llm}}\n"
                        "  - {name: emit, type: sse_emit}\nedges:\n  - exact.hit -> emit\n",
                    builtin_registry());
}

// An answer without max_tokens that a gate capped ends where the caller's limits stood at the
// time, not where the request says: it is not kept. One that max_tokens ended is.
TEST_F(ExactCache, AnAnswerEndedByAGatesCapIsNotKept) {
  auto pipeline = cached_model();
  ASSERT_TRUE(pipeline);
  auto capped = [](Request& r) {
    r.generation.max_tokens = 0;
    r.generation.ignore_eos = true;
    r.generation.answer_token_cap = 8;
  };
  Asked first = ask(*pipeline, "Tell me about the harbour.", "tenant-a", capped);
  ASSERT_FALSE(first.request->error()) << first.request->error()->message;
  EXPECT_EQ(first.request->finish_reason(), FinishReason::length);
  EXPECT_EQ(ask(*pipeline, "Tell me about the harbour.", "tenant-a", capped).cache, "miss");
  auto bounded = [](Request& r) {
    r.generation.max_tokens = 8;
    r.generation.ignore_eos = true;
  };
  ASSERT_EQ(ask(*pipeline, "Tell me about the harbour.", "tenant-a", bounded).cache, "miss");
  EXPECT_EQ(ask(*pipeline, "Tell me about the harbour.", "tenant-a", bounded).cache, "exact");
}

// A kept answer longer than what the gates granted this request (its cap) is not served to it.
TEST_F(ExactCache, AKeptAnswerLongerThanTheCapIsNotServed) {
  auto pipeline = cached_model();
  ASSERT_TRUE(pipeline);
  auto capped = [](int64_t cap) {
    return [cap](Request& r) {
      r.generation.max_tokens = 0;  // the answer fills the context: no gate capped it
      r.generation.ignore_eos = true;
      r.generation.answer_token_cap = cap;
    };
  };
  Asked first = ask(*pipeline, "Tell me about the lighthouse.", "tenant-a", capped(0));
  ASSERT_FALSE(first.request->error()) << first.request->error()->message;
  ASSERT_EQ(first.request->finish_reason(), FinishReason::length);
  int64_t length = first.request->usage.completion_tokens;
  ASSERT_GT(length, 100);
  EXPECT_EQ(ask(*pipeline, "Tell me about the lighthouse.", "tenant-a", capped(length - 1)).cache,
            "miss");
  EXPECT_EQ(ask(*pipeline, "Tell me about the lighthouse.", "tenant-a", capped(length)).cache,
            "exact");
}

TEST_F(ExactCache, ASampledRequestBypassesUnlessSeededOrConfiguredOtherwise) {
  auto pipeline = cached_echo();
  ASSERT_TRUE(pipeline);
  auto sampled = [](Request& r) { r.generation.temperature = 0.8f; };
  for (int i = 0; i < 2; ++i) {
    Asked asked = ask(*pipeline, "Write a poem about the sea.", "tenant-a", sampled);
    EXPECT_EQ(asked.cache, "bypass");
  }
  EXPECT_EQ(misses(), 2);
  auto seeded = [](Request& r) {
    r.generation.temperature = 0.8f;
    r.generation.seed = 42;
  };
  EXPECT_EQ(ask(*pipeline, "Write a poem about the sea.", "tenant-a", seeded).cache, "miss");
  EXPECT_EQ(ask(*pipeline, "Write a poem about the sea.", "tenant-a", seeded).cache, "exact");
  auto with_logprobs = [](Request& r) { r.generation.logprobs = true; };
  EXPECT_EQ(ask(*pipeline, "Write a poem about the sea.", "tenant-a", with_logprobs).cache,
            "bypass");

  auto any_answer = cached_echo("{deterministic_only: false}");
  ASSERT_TRUE(any_answer);
  EXPECT_EQ(ask(*any_answer, "Write a poem about the sea.", "tenant-a", sampled).cache, "miss");
  EXPECT_EQ(ask(*any_answer, "Write a poem about the sea.", "tenant-a", sampled).cache, "exact");
}

TEST_F(ExactCache, AMaskedAnswerIsNeverStored) {
  // Output moderation masks e-mail addresses; the hit port feeds it too, as in graphs/chat.yaml.
  auto pipeline = cached_echo("{}", "  - {name: guard, type: output_moderation}\n", "guard");
  ASSERT_TRUE(pipeline);
  for (int i = 0; i < 2; ++i) {
    Asked masked = ask(*pipeline, "write to bob@example.com please");
    EXPECT_EQ(masked.text, "write to [redacted] please");
    EXPECT_EQ(masked.cache, "miss") << "a masked answer was served from the cache";
  }
  EXPECT_EQ(misses(), 2);
  ask(*pipeline, "write to me please");
  Asked clean = ask(*pipeline, "write to me please");
  EXPECT_EQ(clean.cache, "exact");
  EXPECT_EQ(clean.text, "write to me please");
}

TEST_F(ExactCache, AnAnswerExpiresAfterItsTtl) {
  auto pipeline = cached_echo("{ttl_s: 0.05}");
  ASSERT_TRUE(pipeline);
  ask(*pipeline, "Which harbour has the blue boats?");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(ask(*pipeline, "Which harbour has the blue boats?").cache, "miss");
  EXPECT_EQ(misses(), 2);
}

TEST_F(ExactCache, TheLeastRecentlyUsedAnswerGoesFirstPastMaxEntries) {
  auto pipeline = cached_echo("{max_entries: 2}");
  ASSERT_TRUE(pipeline);
  ask(*pipeline, "first question");
  ask(*pipeline, "second question");
  ASSERT_EQ(ask(*pipeline, "first question").cache, "exact");  // now the most recently used
  ask(*pipeline, "third question");                            // evicts "second question"
  EXPECT_EQ(ask(*pipeline, "first question").cache, "exact");
  EXPECT_EQ(ask(*pipeline, "third question").cache, "exact");
  EXPECT_EQ(ask(*pipeline, "second question").cache, "miss");
}

TEST_F(ExactCache, AForgottenConversationIsAnsweredAgain) {
  auto pipeline = cached_echo();
  ASSERT_TRUE(pipeline);
  ask(*pipeline, "Which harbour has the red boats?");
  ask(*pipeline, "Which harbour has the red boats?", "tenant-b");
  auto* admin = pipeline->find<CacheAdmin>();
  ASSERT_NE(admin, nullptr);
  EXPECT_EQ(admin->cache_name(), "exact");
  CacheCorrection correction;
  correction.tenant = "tenant-a";
  correction.model = "test-model";
  correction.messages = {{"user", "Which harbour has the red boats?"}};
  EXPECT_EQ(admin->forget(correction), 1u);
  EXPECT_EQ(ask(*pipeline, "Which harbour has the red boats?").cache, "miss");
  EXPECT_EQ(ask(*pipeline, "Which harbour has the red boats?", "tenant-b").cache, "exact")
      << "a correction for tenant A removed tenant B's entry";
}

}  // namespace
}  // namespace chatflow::testing
