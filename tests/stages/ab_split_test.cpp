// A/B assignment: weights hold over many callers, a caller keeps its arm, and the arm is
// visible on the request (annotation, response header).
#include <map>

#include <gtest/gtest.h>

#include "support/pipeline_helpers.h"

namespace chatflow::testing {
namespace {

std::unique_ptr<Pipeline> experiment(const std::string& key = "session") {
  return build_yaml(
      "version: 1\nmax_in_flight: 20000\nstages:\n"
      "  - {name: split, type: ab_split, config: {key: " +
          key +
          ", arms: {control: 50, larger: 30, smaller: 20}}}\n"
          "  - {name: control, type: echo, config: {prefix: 'control '}}\n"
          "  - {name: larger, type: echo, config: {prefix: 'larger '}}\n"
          "  - {name: smaller, type: echo, config: {prefix: 'smaller '}}\n"
          "  - {name: emit, type: sse_emit}\n"
          "edges:\n  - split.control -> control\n  - split.larger -> larger\n"
          "  - split.smaller -> smaller\n  - control.out -> emit\n  - larger.out -> emit\n"
          "  - smaller.out -> emit\n",
      builtin_registry());
}

std::string arm_of(Pipeline& pipeline, const std::string& session, std::string* text = nullptr) {
  std::shared_ptr<CollectingSink> sink;
  auto request = user_request("hi", sink);
  request->session_id = session;
  EXPECT_EQ(pipeline.submit(request), Admission::accepted);
  EXPECT_TRUE(sink->wait());
  if (text) *text = sink->text();
  return request->annotation("arm").value_or("");
}

TEST(AbSplit, TenThousandCallersLandWithinTwoPercentOfTheWeights) {
  auto pipeline = experiment();
  ASSERT_TRUE(pipeline);
  std::map<std::string, int> counts;
  const int callers = 10000;
  for (int i = 0; i < callers; ++i)
    ++counts[arm_of(*pipeline, "user-" + std::to_string(i))];
  ASSERT_EQ(counts.size(), 3u);
  EXPECT_NEAR(counts["control"] / double(callers), 0.50, 0.02);
  EXPECT_NEAR(counts["larger"] / double(callers), 0.30, 0.02);
  EXPECT_NEAR(counts["smaller"] / double(callers), 0.20, 0.02);
}

TEST(AbSplit, ACallerStaysInItsArmAndTheArmAnswers) {
  auto pipeline = experiment();
  ASSERT_TRUE(pipeline);
  for (int i = 0; i < 50; ++i) {
    std::string session = "sticky-" + std::to_string(i);
    std::string text;
    std::string first = arm_of(*pipeline, session, &text);
    EXPECT_EQ(text, first + " hi") << "the request went to another arm's stage";
    for (int repeat = 0; repeat < 5; ++repeat)
      EXPECT_EQ(arm_of(*pipeline, session), first) << session;
  }
  std::shared_ptr<CollectingSink> sink;
  auto request = user_request("hi", sink);
  request->session_id = "header-check";
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  bool found = false;
  for (const auto& [name, value] : request->response_headers())
    found |= name == "x-chatflow-arm" && value == request->annotation("arm");
  EXPECT_TRUE(found);
}

// The app-server setup: one key (one tenant and user) passing its end users in the body's
// `user` field. Each label is an arm's caller of its own, and keeps its arm.
std::string arm_of_label(Pipeline& pipeline, const std::string& label) {
  std::shared_ptr<CollectingSink> sink;
  auto request = user_request("hi", sink);
  request->identity.tenant = "app";
  request->identity.user = "backend";
  request->end_user = label;
  EXPECT_EQ(pipeline.submit(request), Admission::accepted);
  EXPECT_TRUE(sink->wait());
  return request->annotation("arm").value_or("");
}

TEST(AbSplit, EndUserLabelsOfOneKeySplitByTheWeightsAndEachStays) {
  auto pipeline = experiment("end_user");
  ASSERT_TRUE(pipeline);
  std::map<std::string, int> counts;
  std::map<std::string, std::string> first_arm;
  const int labels = 4000;
  for (int i = 0; i < labels; ++i) {
    std::string label = "end-user-" + std::to_string(i);
    first_arm[label] = arm_of_label(*pipeline, label);
    ++counts[first_arm[label]];
  }
  ASSERT_EQ(counts.size(), 3u) << "one key's labels all went to the same arms";
  EXPECT_NEAR(counts["control"] / double(labels), 0.50, 0.03);
  EXPECT_NEAR(counts["larger"] / double(labels), 0.30, 0.03);
  EXPECT_NEAR(counts["smaller"] / double(labels), 0.20, 0.03);
  for (int i = 0; i < labels; i += 40) {
    std::string label = "end-user-" + std::to_string(i);
    EXPECT_EQ(arm_of_label(*pipeline, label), first_arm[label]) << label << " changed arms";
  }
}

TEST(AbSplit, WithoutALabelAnEndUserSplitKeysByTheUserAsKeyUserDoes) {
  // Same salt, so both experiments would agree on a user.
  auto by_label = build_yaml(
      "version: 1\nstages:\n"
      "  - {name: split, type: ab_split, config: {key: end_user, salt: s, arms: {a: 50, b: 50}}}\n"
      "  - {name: a, type: echo}\n  - {name: b, type: echo}\n  - {name: emit, type: sse_emit}\n"
      "edges:\n  - split.a -> a\n  - split.b -> b\n  - a.out -> emit\n  - b.out -> emit\n",
      builtin_registry());
  auto by_user = build_yaml(
      "version: 1\nstages:\n"
      "  - {name: split, type: ab_split, config: {key: user, salt: s, arms: {a: 50, b: 50}}}\n"
      "  - {name: a, type: echo}\n  - {name: b, type: echo}\n  - {name: emit, type: sse_emit}\n"
      "edges:\n  - split.a -> a\n  - split.b -> b\n  - a.out -> emit\n  - b.out -> emit\n",
      builtin_registry());
  ASSERT_TRUE(by_label && by_user);
  auto arm = [](Pipeline& pipeline, const std::string& user, const std::string& label) {
    std::shared_ptr<CollectingSink> sink;
    auto request = user_request("hi", sink);
    request->identity.tenant = "app";
    request->identity.user = user;
    request->end_user = label;
    EXPECT_EQ(pipeline.submit(request), Admission::accepted);
    EXPECT_TRUE(sink->wait());
    return request->annotation("arm").value_or("");
  };
  std::map<std::string, int> by_arm;
  for (int i = 0; i < 40; ++i) {
    std::string user = "user-" + std::to_string(i);
    std::string unlabelled = arm(*by_label, user, "");
    EXPECT_EQ(unlabelled, arm(*by_user, user, "")) << user;
    ++by_arm[unlabelled];
  }
  EXPECT_EQ(by_arm.size(), 2u) << "unlabelled callers were not split by user";
}

TEST(AbSplit, BadArmsAreConfigErrorsWithTheirLocation) {
  Diagnostics diagnostics;
  check_yaml(
      "version: 1\nstages:\n  - {name: s, type: ab_split, config: {arms: {a: 50, b: x}}}\n"
      "  - {name: e, type: echo}\n",
      builtin_registry(), diagnostics);
  std::string errors = all_errors(diagnostics);
  EXPECT_NE(errors.find("test.yaml:3:"), std::string::npos) << errors;
  EXPECT_NE(errors.find("arm 'b': the weight must be a number >= 0, got 'x'"), std::string::npos)
      << errors;
  Diagnostics unknown;
  check_yaml(
      "version: 1\nstages:\n  - {name: s, type: ab_split, config: {arms: {a: 1, b: 1}}}\n"
      "  - {name: e, type: echo}\nedges:\n  - s.c -> e\n",
      builtin_registry(), unknown);
  EXPECT_NE(all_errors(unknown).find("has no port 'c'"), std::string::npos) << all_errors(unknown);
}

}  // namespace
}  // namespace chatflow::testing
