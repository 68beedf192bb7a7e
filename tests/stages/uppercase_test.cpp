// The uppercase stream stage: ASCII letters only, UTF-8 untouched, order kept.
#include <gtest/gtest.h>

#include "support/pipeline_helpers.h"

namespace chatflow::testing {
namespace {

TEST(UppercaseStage, UppercasesAsciiAndLeavesUtf8Alone) {
  auto pipeline = build_yaml(R"(version: 1
stages:
  - {name: echo, type: echo}
  - {name: shout, type: uppercase}
)",
                             builtin_registry());
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  ASSERT_EQ(pipeline->submit(user_request("héllo wörld 你好 abc", sink)), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  EXPECT_EQ(sink->text(), "HéLLO WöRLD 你好 ABC");
}

}  // namespace
}  // namespace chatflow::testing
