// The classifier provider: Llama Guard's task prompt for a user message and for an answer, and
// its "safe" / "unsafe\nS1,S2" answers read (and anything else refused, never taken as safe).
#include "framework/moderation/llama_guard.h"

#include <gtest/gtest.h>

namespace chatflow::moderation {
namespace {

TEST(LlamaGuard, SafeAndUnsafeAnswersAreRead) {
  std::string error;
  auto safe = parse_llama_guard_answer("safe", error);
  ASSERT_TRUE(safe) << error;
  EXPECT_FALSE(safe->flagged);
  auto unsafe = parse_llama_guard_answer("unsafe\nS1,S10", error);
  ASSERT_TRUE(unsafe) << error;
  EXPECT_TRUE(unsafe->flagged);
  EXPECT_EQ(unsafe->categories, (std::vector<std::string>{"S1", "S10"}));
}

TEST(LlamaGuard, SpacingCaseAndAMissingCategoryLineAreTolerated) {
  std::string error;
  auto spaced = parse_llama_guard_answer("\n\n  Unsafe \r\n S2 , S11 ,\n", error);
  ASSERT_TRUE(spaced) << error;
  EXPECT_TRUE(spaced->flagged);
  EXPECT_EQ(spaced->categories, (std::vector<std::string>{"S2", "S11"}));
  auto bare = parse_llama_guard_answer("UNSAFE", error);
  ASSERT_TRUE(bare) << error;
  EXPECT_TRUE(bare->flagged);
  EXPECT_TRUE(bare->categories.empty());
  auto dotted = parse_llama_guard_answer(" Safe.", error);
  ASSERT_TRUE(dotted) << error;
  EXPECT_FALSE(dotted->flagged);
}

TEST(LlamaGuard, AnythingElseIsAnErrorQuotingTheAnswer) {
  for (const char* answer :
       {"", "   \n ", "I think this is safe", "safely", "unsafe!", "yes\nS1"}) {
    std::string error;
    EXPECT_FALSE(parse_llama_guard_answer(answer, error)) << answer;
    EXPECT_NE(error.find("neither 'safe' nor 'unsafe'"), std::string::npos) << error;
  }
  std::string error;
  EXPECT_FALSE(parse_llama_guard_answer("unsafe\nThe user wants {to} do harm!", error));
  EXPECT_NE(error.find("not a comma-separated list"), std::string::npos) << error;
}

TEST(LlamaGuard, TheTaskJudgesTheUserOrTheAgent) {
  std::string user =
      llama_guard_task(llama_guard_categories(), "how do I hurt someone", {}, Speaker::user);
  EXPECT_NE(user.find("unsafe content in 'User' messages"), std::string::npos);
  EXPECT_NE(user.find("S1: Violent Crimes.\nS2: Non-Violent Crimes."), std::string::npos);
  EXPECT_NE(user.find("S14: Code Interpreter Abuse.\n<END UNSAFE CONTENT CATEGORIES>"),
            std::string::npos);
  EXPECT_NE(user.find("<BEGIN CONVERSATION>\n\nUser: how do I hurt someone\n\n<END CONVERSATION>"),
            std::string::npos);
  EXPECT_NE(user.find("ONLY THE LAST User message"), std::string::npos);
  EXPECT_EQ(user.find("Agent:"), std::string::npos);

  std::string agent = llama_guard_task({"S1: Violence."}, "tell me a story", "Once upon a time",
                                       Speaker::assistant);
  EXPECT_NE(agent.find("unsafe content in 'Agent' messages"), std::string::npos);
  EXPECT_NE(agent.find("<BEGIN UNSAFE CONTENT CATEGORIES>\nS1: Violence.\n<END"),
            std::string::npos);
  EXPECT_NE(agent.find("User: tell me a story\n\nAgent: Once upon a time\n\n<END CONVERSATION>"),
            std::string::npos);
  EXPECT_NE(agent.find("ONLY THE LAST Agent message"), std::string::npos);
}

CheckInput input_of(std::string text, Speaker speaker, std::string question = {}) {
  CheckInput input;
  input.text = std::move(text);
  input.speaker = speaker;
  input.question = std::move(question);
  input.deadline = CheckClock::now() + std::chrono::seconds(5);
  return input;
}

TEST(ClassifierProvider, AsksTheTaskAndReadsTheAnswer) {
  std::string asked;
  ClassifierProvider provider(
      [&](const std::string& task, const CheckInput&) {
        asked = task;
        return std::string("unsafe\nS9");
      },
      llama_guard_categories(), "gguf_model 'guard'");
  CheckOutcome outcome =
      provider.check(input_of("mix these chemicals", Speaker::assistant, "how to clean"));
  ASSERT_EQ(outcome.kind, CheckOutcome::Kind::verdict) << outcome.error;
  EXPECT_EQ(outcome.verdict.categories, std::vector<std::string>{"S9"});
  EXPECT_NE(asked.find("User: how to clean\n\nAgent: mix these chemicals"), std::string::npos);
}

TEST(ClassifierProvider, AnUnreadableAnswerOrAFailedModelIsAFailure) {
  ClassifierProvider rambling(
      [](const std::string&, const CheckInput&) { return std::string("Sure! Here"); },
      llama_guard_categories(), "upstream 'guard'");
  CheckOutcome unreadable = rambling.check(input_of("hi", Speaker::user));
  EXPECT_EQ(unreadable.kind, CheckOutcome::Kind::failed);
  EXPECT_NE(unreadable.error.find("upstream 'guard': the classifier's answer is neither"),
            std::string::npos)
      << unreadable.error;
  ClassifierProvider broken(
      [](const std::string&, const CheckInput&) -> std::string {
        throw std::runtime_error("the engine refused the sequence");
      },
      llama_guard_categories(), "gguf_model 'guard'");
  CheckOutcome failed = broken.check(input_of("hi", Speaker::user));
  EXPECT_EQ(failed.kind, CheckOutcome::Kind::failed);
  EXPECT_EQ(failed.error, "gguf_model 'guard': the engine refused the sequence");
}

}  // namespace
}  // namespace chatflow::moderation
