// The semantic_cache stage in front of echo. Echo repeats each question in its own words, so an
// answer from the cache is told by its text: the paraphrase gets the first question's words back.
// The embedder is the default one (hashed n-grams); the pairs are the measured examples of
// docs/caches-and-sessions.md. Multi-turn sessions run behind history_trim as on the quick-start
// server, and the follow-up dataset (tests/data/semantic_cache_followups.jsonl) is played in front
// of a model stand-in whose answers are numbered, so each cached answer tells which question it was
// first given to.
#include <atomic>
#include <fstream>

#include <gtest/gtest.h>

#include "framework/api/registry.h"
#include "framework/cache/followup_dataset.h"
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

// chat_template_kwargs are in the partition as JSON: the same object written in another key
// order or spacing is the same partition, another value is another.
TEST(SemanticCache, ChatTemplateKwargsPartitionAsJsonWhateverTheirKeyOrder) {
  auto pipeline = cached_echo();
  ASSERT_TRUE(pipeline);
  auto ask_with = [&](const std::string& question, const std::string& kwargs) {
    std::shared_ptr<CollectingSink> sink;
    auto request = user_request(question, sink);
    request->model = "test-model";
    request->identity.tenant = "tenant-a";
    request->chat_template_kwargs = kwargs;
    request->generation.max_tokens = 12;
    EXPECT_EQ(pipeline->submit(request), Admission::accepted);
    EXPECT_TRUE(sink->wait());
    return Asked{request, sink->text()};
  };
  ask_with("Where is the spare key?", R"({"enable_thinking":true,"style":"brief"})");
  EXPECT_FALSE(
      ask_with("where is the spare key", R"({"enable_thinking":false,"style":"brief"})").hit());
  Asked reordered =
      ask_with("where is the spare key", R"({ "style" : "brief", "enable_thinking" : true })");
  EXPECT_TRUE(reordered.hit()) << "the same kwargs in another order missed";
  EXPECT_EQ(reordered.text, "Where is the spare key?");
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

// The quick-start pipeline's order: history_trim puts the session's earlier turns before the
// new message, then the cache. Echo's answers start with a story of a few hundred characters, as
// a model's do, so the earlier turns fill the conversation.
std::unique_ptr<Pipeline> session_pipeline(const std::string& cache_config) {
  engine::ModelShape shape;
  shape.ffn = 96;
  shape.context = 2048;
  shape.type = kernels::TensorType::q8_0;
  const std::string story =
      "Once upon a time a dragon lived in the mountains above a quiet village, and every "
      "evening the dragon watched the lights of the village come on one by one while the wind "
      "carried the smell of bread and smoke up the valley to its cave. ";
  return build_yaml(
      "version: 1\nresources:\n  llm: {type: gguf_model, path: \"" + temp_model(shape) +
          "\"}\n  history: {type: history_store, backend: memory}\nstages:\n"
          "  - {name: trim, type: history_trim, config: {store: history, model: "
          "llm, budget_tokens: 100000}}\n"
          "  - {name: semantic, type: semantic_cache, config: " +
          cache_config + "}\n  - {name: echo, type: echo, config: {prefix: \"" + story +
          "\"}}\n  - {name: emit, type: sse_emit}\nedges:\n  - semantic.hit -> emit\n",
      builtin_registry());
}

Asked ask_in_session(Pipeline& pipeline, const std::string& session, const std::string& question) {
  std::shared_ptr<CollectingSink> sink;
  auto request = user_request(question, sink);
  request->model = "test-model";
  request->identity.tenant = "tenant-a";
  request->identity.user = "ann";
  request->session_id = session;
  request->generation.temperature = 0.7f;
  request->generation.max_tokens = 64;
  EXPECT_EQ(pipeline.submit(request), Admission::accepted);
  EXPECT_TRUE(sink->wait());
  return {request, sink->text()};
}

// Issue 31: on the quick-start server the fourth question of this session was answered with the
// third one's answer (similarity 0.9543), because the whole conversation was embedded.
TEST(SemanticCache, TheIssueDialogueNeverGetsThePreviousAnswer) {
  auto pipeline = session_pipeline("{threshold: 0.95}");  // graphs/chat.yaml's settings
  ASSERT_TRUE(pipeline);
  const std::vector<std::string> questions = {"Hi there, please introduce yourself",
                                              "Tell me a story about a dragon", "And then what?",
                                              "Why was the dragon sad?"};
  for (const auto& question : questions) {
    Asked asked = ask_in_session(*pipeline, "dragon-session", question);
    ASSERT_FALSE(asked.request->error()) << asked.request->error()->message;
    EXPECT_FALSE(asked.hit()) << "'" << question << "' was answered from the cache with '"
                              << asked.text << "'";
    EXPECT_TRUE(asked.text.ends_with(question)) << "not echo's answer: " << asked.text;
  }
  // The history really held the earlier turns: the last request's conversation had all eight
  // messages before it was answered.
  Asked again = ask_in_session(*pipeline, "dragon-session", "Why was the dragon sad?");
  EXPECT_EQ(again.request->messages.size(), 9u);
  EXPECT_FALSE(again.hit()) << "a new turn of the conversation is another question";
}

// The same session replayed (a suggested first question, answered from the cache, then the same
// follow-up) meets the same earlier turns: its follow-up is a true repeat and hits.
TEST(SemanticCache, AFollowUpHitsOnlyAfterTheSameEarlierTurns) {
  auto pipeline = cached_echo();
  ASSERT_TRUE(pipeline);
  auto converse = [&](std::vector<Message> messages) {
    std::shared_ptr<CollectingSink> sink;
    auto request = user_request("", sink);
    request->messages = std::move(messages);
    request->model = "test-model";
    request->identity.tenant = "tenant-a";
    request->generation.temperature = 0.7f;
    EXPECT_EQ(pipeline->submit(request), Admission::accepted);
    EXPECT_TRUE(sink->wait());
    return Asked{request, sink->text()};
  };
  Asked story = converse({{"user", "Tell me about pandas"}});
  ASSERT_FALSE(story.hit());
  Asked follow = converse(
      {{"user", "Tell me about pandas"}, {"assistant", story.text}, {"user", "What do they eat?"}});
  EXPECT_FALSE(follow.hit());
  EXPECT_EQ(follow.text, "What do they eat?");

  Asked replayed = converse(
      {{"user", "tell me about pandas"}, {"assistant", story.text}, {"user", "what do they eat"}});
  EXPECT_TRUE(replayed.hit()) << "the same earlier turns (case and punctuation aside)";
  EXPECT_EQ(replayed.text, "What do they eat?");

  Asked elsewhere = converse({{"user", "Tell me about koalas"},
                              {"assistant", "Koalas sleep most of the day."},
                              {"user", "What do they eat?"}});
  EXPECT_FALSE(elsewhere.hit()) << "'they' are koalas here, not pandas";
  EXPECT_EQ(elsewhere.text, "What do they eat?");
  Asked other_answer = converse({{"user", "Tell me about pandas"},
                                 {"assistant", "Pandas are bears from China."},
                                 {"user", "What do they eat?"}});
  EXPECT_FALSE(other_answer.hit()) << "after another answer the follow-up may ask another thing";

  // A first question never meets a follow-up's entry, nor the other way round.
  Asked alone = converse({{"user", "What do they eat?"}});
  EXPECT_FALSE(alone.hit());
}

TEST(SemanticCache, AVerifiedNeighbourWithAnotherIntentIsNotServed) {
  auto pipeline = cached_echo();
  ASSERT_TRUE(pipeline);
  for (const auto& [first, second] : std::vector<std::pair<std::string, std::string>>{
           {"Did the dog bite the man?", "Did the man bite the dog?"},
           {"Flights from Paris to Rome", "Flights from Rome to Paris"},
           {"Is it safe to swim after eating?", "Was it safe to swim after eating?"}}) {
    ASSERT_GE(cosine(first, second), 0.9f) << first << " / " << second;
    ask(*pipeline, first);
    Asked changed = ask(*pipeline, second);
    EXPECT_FALSE(changed.hit()) << "'" << second << "' got the answer to '" << first << "'";
    EXPECT_EQ(changed.text, second);
  }
}

TEST(SemanticCache, AnAssistantMessageToContinueBypasses) {
  auto pipeline = cached_echo();
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = user_request("Write a haiku about rain", sink);
  request->messages.push_back({"assistant", "Soft rain on"});
  request->identity.tenant = "tenant-a";
  request->generation.temperature = 0.7f;
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  EXPECT_EQ(request->annotation("semantic_cache"), "bypass");
  EXPECT_EQ(request->annotation("semantic_cache_bypass"), "not_a_question");
}

// The model stand-in for the dataset: "[answer N] " and the question, then story words as a
// model's long answers have; its answers never repeat.
struct StandInConfig {
  int words = 100;
};

class StandInModel final : public RequestStage {
 public:
  explicit StandInModel(StandInConfig config) : config_(config) {}
  Route process(Request& request, StageIo& io) override {
    // The words of `chatflow similarity --dataset`'s stand-in, so both measure the same.
    static const std::vector<std::string> kStory = {
        "the",  "old",     "dragon",  "flew",  "over",     "the",     "frozen", "valley", "looking",
        "for",  "the",     "village", "where", "the",      "young",   "knight", "had",    "hidden",
        "a",    "map",     "of",      "the",   "mountain", "caves",   "and",    "the",    "river",
        "that", "ran",     "under",   "them",  "toward",   "the",     "sea",    "while",  "the",
        "wind", "carried", "songs",   "of",    "the",      "harvest", "across", "the",    "fields"};
    size_t number = ++answers_;
    std::string text = "[answer " + std::to_string(number) + "] " + request.last_user_message();
    for (int word = 0; word < config_.words; ++word)
      text += " " + kStory[(number * 7 + static_cast<size_t>(word)) % kStory.size()];
    ChunkWriter writer = io.open_stream(0);
    writer.write(Chunk::delta(text));
    writer.finish(FinishReason::stop);
    return Route::streaming();
  }

 private:
  StandInConfig config_;
  std::atomic<size_t> answers_{0};
};

Registry registry_with_stand_in() {
  Registry registry = builtin_registry();
  StageTypeBuilder<StandInConfig> type("stand_in_model", StageKind::request, "numbered answers");
  type.port("out", PortKind::stream, "the answer");
  type.config().key("words", &StandInConfig::words, "story words after the question");
  type.create([](const StandInConfig& config, StageContext&) {
    return std::make_unique<StandInModel>(config);
  });
  registry.add(type.build());
  return registry;
}

cache::FollowupScore play_dataset(double threshold) {
  auto conversations = cache::read_followup_dataset(std::string(CHATFLOW_SOURCE_DIR) +
                                                    "/tests/data/semantic_cache_followups.jsonl");
  Registry registry = registry_with_stand_in();
  auto pipeline = build_yaml(
      "version: 1\nstages:\n  - {name: semantic, type: semantic_cache, config: "
      "{threshold: " +
          std::to_string(threshold) +
          "}}\n  - {name: model, type: stand_in_model}\n  - {name: emit, type: "
          "sse_emit}\nedges:\n  - semantic.hit -> emit\n",
      registry);
  if (!pipeline) return {};
  return cache::score_followups(conversations, [&](const std::vector<Message>& messages) {
    std::shared_ptr<CollectingSink> sink;
    auto request = user_request("", sink);
    request->messages = messages;
    request->model = "stand-in";
    request->identity.tenant = "dataset";
    request->generation.temperature = 0.7f;
    EXPECT_EQ(pipeline->submit(request), Admission::accepted);
    EXPECT_TRUE(sink->wait());
    Asked asked{request, sink->text()};
    return cache::ServedAnswer{asked.text, asked.hit()};
  });
}

std::string lines(const std::vector<std::string>& list) {
  std::string text;
  for (const auto& line : list)
    text += "\n  " + line;
  return text;
}

// Issue 31's measure: over the dataset's conversations, no question is given another question's
// answer, and the true repeats still hit. The floors are what this embedder (n-grams) measured;
// before the change the same dataset gave 86 false hits of 225 at 0.95 (see
// docs/caches-and-sessions.md).
TEST(SemanticCacheFollowups, NoWrongAnswerAndTheTrueRepeatsHitAtTheDefaultThreshold) {
  cache::FollowupScore score = play_dataset(0.95);
  ASSERT_GE(score.different, 200u) << "the dataset shrank";
  EXPECT_EQ(score.wrong_answers, 0u) << lines(score.wrong);
  EXPECT_EQ(score.different_served, 0u);
  std::printf("threshold 0.95: true repeats %zu of %zu, false hits %zu of %zu\n",
              score.repeats_served, score.repeats, score.different_served, score.different);
  EXPECT_GE(score.repeats_served, 72u) << lines(score.missed_repeats);
}

TEST(SemanticCacheFollowups, NoWrongAnswerAndTheTrueRepeatsHitAtALowerThreshold) {
  cache::FollowupScore score = play_dataset(0.9);
  EXPECT_EQ(score.wrong_answers, 0u) << lines(score.wrong);
  EXPECT_EQ(score.different_served, 0u);
  std::printf("threshold 0.90: true repeats %zu of %zu, false hits %zu of %zu\n",
              score.repeats_served, score.repeats, score.different_served, score.different);
  EXPECT_GE(score.repeats_served, 77u) << lines(score.missed_repeats);
}

}  // namespace
}  // namespace chatflow::testing
