#include "framework/cache/question_verifier.h"

#include <gtest/gtest.h>

namespace chatflow::cache {
namespace {

TEST(QuestionVerifier, TakesCaseContractionsPluralsAndPolitenessForTheSameQuestion) {
  EXPECT_TRUE(
      same_question("Is ibuprofen safe during pregnancy?", "is ibuprofen safe during pregnancy"));
  EXPECT_TRUE(same_question("What is the capital of France?", "what is the capital of france"));
  EXPECT_TRUE(same_question("What is the capital of France?", "What's the capital of France?"));
  EXPECT_TRUE(same_question("Explain the GPU memory model", "explain the gpu memory model please"));
  EXPECT_TRUE(same_question("What is the router password?", "what is the router's password"));
  EXPECT_TRUE(same_question("What does a panda eat?", "What do pandas eat?"));
  EXPECT_TRUE(same_question("How don’t I fall?", "how don't i fall"));  // a curly apostrophe
  EXPECT_TRUE(same_question("And then what?", "what then"));
  EXPECT_TRUE(same_question("北京的人口是多少？", "请问北京人口是多少"));
}

TEST(QuestionVerifier, RejectsNumbersNegationsAndNames) {
  EXPECT_FALSE(same_question("Is ibuprofen safe during pregnancy?",
                             "Is ibuprofen not safe during pregnancy?"));
  EXPECT_FALSE(same_question("Can I take it?", "I can't take it?"));
  EXPECT_FALSE(same_question("What is 15% of 80?", "What is 15% of 90?"));
  EXPECT_FALSE(same_question("What is 15% of 80?", "What is 80% of 15?"));
  EXPECT_FALSE(same_question("What is 15% of 80?", "What is 15 of 80?"));
  EXPECT_FALSE(same_question("Flights from Paris to Rome", "Flights from Paris to Milan"));
  EXPECT_FALSE(same_question("这个药安全吗", "这个药不安全吗"));
  EXPECT_FALSE(same_question("2010年北京的人口是多少？", "北京的人口是多少？"));
}

// Issue 31: the question that got the previous turn's answer.
TEST(QuestionVerifier, RejectsAnotherQuestionWordOrOtherContentWords) {
  EXPECT_EQ(question_difference("Why was the dragon sad?", "And then what?"),
            "different question words: why / what");
  EXPECT_FALSE(same_question("What happened next?", "And then what?"));
  EXPECT_FALSE(same_question("How do I bake bread?", "How do I bake gluten-free bread?"));
  EXPECT_FALSE(same_question("Flights from Paris to Rome", "Flights from Rome to Paris"));
  EXPECT_FALSE(same_question("Which books were written by George Orwell?",
                             "Which books were written about George Orwell?"));
  EXPECT_FALSE(same_question("What is in the red box?", "What is on the red box?"));
  EXPECT_FALSE(same_question("Did the dog bite the man?", "Did the man bite the dog?"));
  EXPECT_FALSE(same_question("Where is the Eiffel Tower?", "Who built the Eiffel Tower?"));
  EXPECT_FALSE(same_question("然后呢？", "龙为什么伤心？"));
  EXPECT_FALSE(same_question("熊猫吃什么？", "老虎吃什么？"));
}

TEST(QuestionVerifier, RejectsOtherReferencesTensesAndModalVerbs) {
  EXPECT_EQ(question_difference("Who are you?", "Who am I?"),
            "different people or things referred to: you / i");
  EXPECT_FALSE(same_question("What do they eat?", "What does it eat?"));
  EXPECT_EQ(question_difference("Who is the president?", "Who was the president?"),
            "different tenses");
  EXPECT_FALSE(same_question("Didn't it work?", "Doesn't it work?"));
  EXPECT_EQ(question_difference("Can I take ibuprofen?", "Should I take ibuprofen?"),
            "different modal verbs: can / should");
  EXPECT_FALSE(same_question("这个药安全吗？", "那个药安全吗？"));
}

}  // namespace
}  // namespace chatflow::cache
