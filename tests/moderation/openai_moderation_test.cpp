// The http moderation provider: reading /v1/moderations answers (the service's own categories,
// thresholds over its scores, answers that are not the shape), and calls to a loopback service
// (the body it gets, the API key header, a verdict, a service that never answers).
#include "framework/moderation/openai_moderation.h"

#include <gtest/gtest.h>

#include "support/moderation_service.h"

namespace chatflow::moderation {
namespace {

using testing::ModerationService;

// OpenAI's documented example answer, shortened.
const char kOpenAiAnswer[] = R"({
  "id": "modr-0d9740456c391e43c445bf0f010940c7",
  "model": "omni-moderation-latest",
  "results": [{
    "flagged": true,
    "categories": {"harassment": true, "harassment/threatening": true, "sexual": false,
                   "hate": false, "illicit": false, "violence": true},
    "category_scores": {"harassment": 0.8189, "harassment/threatening": 0.8049,
                        "sexual": 0.0001, "hate": 0.0011, "illicit": 0.0002,
                        "violence": 0.9701}
  }]
})";

TEST(OpenAiModeration, TheBodyHasTheInputAndTheModelWhenGiven) {
  EXPECT_EQ(moderation_request_body("a \"quoted\" text", "omni-moderation-latest"),
            R"({"input":"a \"quoted\" text","model":"omni-moderation-latest"})");
  EXPECT_EQ(moderation_request_body("hello", ""), R"({"input":"hello"})");
}

TEST(OpenAiModeration, TheServicesTrueCategoriesTrip) {
  std::string error;
  auto verdict = parse_moderation_response(kOpenAiAnswer, {}, error);
  ASSERT_TRUE(verdict) << error;
  EXPECT_TRUE(verdict->flagged);
  EXPECT_EQ(verdict->categories,
            (std::vector<std::string>{"harassment", "harassment/threatening", "violence"}));
}

TEST(OpenAiModeration, ThresholdsRaiseAndLowerTheBarByScore) {
  std::string error;
  // violence stays (0.97 >= 0.95), harassment no longer trips (0.82 < 0.9), sexual does (its
  // score reaches 0.0001), hate stays off (0.0011 < 0.5).
  auto verdict = parse_moderation_response(
      kOpenAiAnswer, {{"violence", 0.95}, {"harassment", 0.9}, {"sexual", 0.0001}, {"hate", 0.5}},
      error);
  ASSERT_TRUE(verdict) << error;
  EXPECT_EQ(verdict->categories,
            (std::vector<std::string>{"harassment/threatening", "sexual", "violence"}));
  auto calm = parse_moderation_response(
      kOpenAiAnswer, {{"violence", 0.99}, {"harassment", 0.9}, {"harassment/threatening", 0.9}},
      error);
  ASSERT_TRUE(calm) << error;
  EXPECT_FALSE(calm->flagged);
  EXPECT_TRUE(calm->categories.empty());
}

TEST(OpenAiModeration, AnAnswerWithoutCategoriesCountsItsFlag) {
  std::string error;
  auto flagged = parse_moderation_response(R"({"results": [{"flagged": true}]})", {}, error);
  ASSERT_TRUE(flagged) << error;
  EXPECT_TRUE(flagged->flagged);
  EXPECT_TRUE(flagged->categories.empty());
  auto clean = parse_moderation_response(R"({"results": [{"flagged": false}, {"flagged": false}]})",
                                         {}, error);
  ASSERT_TRUE(clean) << error;
  EXPECT_FALSE(clean->flagged);
}

TEST(OpenAiModeration, EveryResultCounts) {
  std::string error;
  auto verdict = parse_moderation_response(
      R"({"results": [{"categories": {"hate": false}}, {"categories": {"hate": true}}]})", {},
      error);
  ASSERT_TRUE(verdict) << error;
  EXPECT_EQ(verdict->categories, std::vector<std::string>{"hate"});
}

TEST(OpenAiModeration, AnswersOfAnotherShapeAreErrorsNamingWhat) {
  struct Case {
    const char* body;
    const char* error;
  };
  for (const Case& bad : std::vector<Case>{
           {"not json", "not a JSON object"},
           {"[1]", "not a JSON object"},
           {R"({"error": {"message": "Incorrect API key provided"}})",
            "the service answered an error: Incorrect API key provided"},
           {R"({"results": []})", "no \"results\" list"},
           {R"({"results": {"flagged": true}})", "no \"results\" list"},
           {R"({"results": [7]})", "results[0] is not an object"},
           {R"({"results": [{"categories": {"hate": "yes"}}]})",
            "results[0].categories.hate is not a boolean"},
           {R"({"results": [{"categories": []}]})", "results[0].categories is not an object"},
           {R"({"results": [{"score": 1}]})", "neither \"categories\" nor a boolean \"flagged\""},
       }) {
    std::string error;
    EXPECT_FALSE(parse_moderation_response(bad.body, {}, error)) << bad.body;
    EXPECT_NE(error.find(bad.error), std::string::npos) << bad.body << " -> " << error;
  }
}

CheckInput input_of(std::string text, std::chrono::milliseconds timeout) {
  CheckInput input;
  input.text = std::move(text);
  input.deadline = CheckClock::now() + timeout;
  input.request_id = "req-1";
  return input;
}

HttpModerationProvider provider_for(const ModerationService& service, std::string api_key = {}) {
  HttpModerationSettings settings;
  std::string error;
  settings.endpoint = *tools::parse_http_url(service.url(), error);
  settings.url = service.url();
  settings.model = "omni-moderation-latest";
  settings.api_key = std::move(api_key);
  return HttpModerationProvider(std::move(settings));
}

TEST(HttpModerationProvider, PostsTheTextWithItsKeyAndReadsTheVerdict) {
  ModerationService service(std::map<std::string, std::string>{{"dragon", "violence"}});
  auto provider = provider_for(service, "sk-test-123");
  CheckOutcome flagged = provider.check(input_of("a red dragon burns", std::chrono::seconds(5)));
  ASSERT_EQ(flagged.kind, CheckOutcome::Kind::verdict) << flagged.error;
  EXPECT_TRUE(flagged.verdict.flagged);
  EXPECT_EQ(flagged.verdict.categories, std::vector<std::string>{"violence"});
  CheckOutcome clean = provider.check(input_of("a quiet meadow", std::chrono::seconds(5)));
  ASSERT_EQ(clean.kind, CheckOutcome::Kind::verdict) << clean.error;
  EXPECT_FALSE(clean.verdict.flagged);

  auto received = service.received();
  ASSERT_EQ(received.size(), 2u);
  EXPECT_EQ(received[0].body, R"({"input":"a red dragon burns","model":"omni-moderation-latest"})");
  EXPECT_NE(received[0].head.find("POST /v1/moderations HTTP/1.1"), std::string::npos);
  EXPECT_NE(received[0].head.find("Authorization: Bearer sk-test-123"), std::string::npos);
  EXPECT_NE(received[0].head.find("X-Request-Id: req-1"), std::string::npos);
}

TEST(HttpModerationProvider, AServiceThatDoesNotAnswerIsATimeout) {
  ModerationService service(std::map<std::string, std::string>{{"dragon", "violence"}}, "slowpoke");
  auto provider = provider_for(service);
  auto started = CheckClock::now();
  CheckOutcome outcome = provider.check(input_of("slowpoke", std::chrono::milliseconds(200)));
  EXPECT_EQ(outcome.kind, CheckOutcome::Kind::timed_out) << outcome.error;
  EXPECT_LT(CheckClock::now() - started, std::chrono::seconds(3));
}

TEST(HttpModerationProvider, NobodyListeningIsAFailureNamingTheUrl) {
  HttpModerationSettings settings;
  std::string error;
  settings.url = "http://127.0.0.1:1/v1/moderations";
  settings.endpoint = *tools::parse_http_url(settings.url, error);
  HttpModerationProvider provider(settings);
  CheckOutcome outcome = provider.check(input_of("text", std::chrono::seconds(5)));
  EXPECT_EQ(outcome.kind, CheckOutcome::Kind::failed);
  EXPECT_NE(outcome.error.find("http://127.0.0.1:1/v1/moderations: could not connect"),
            std::string::npos)
      << outcome.error;
}

}  // namespace
}  // namespace chatflow::moderation
