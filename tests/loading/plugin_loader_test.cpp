// Plugins as users load them: the example plugins in pipelines, and plugins that are refused
// (wrong ABI, no entry point) or whose stages fail (throw, refuse, pick a port that does not
// exist) without taking the pipeline down.
#include "framework/loading/plugin_loader.h"

#include <gtest/gtest.h>

#include "plugins/sdk/chatflow_plugin.h"
#include "support/pipeline_helpers.h"

namespace chatflow::testing {
namespace {

std::string plugin(const std::string& name) {
  return std::string(CHATFLOW_PLUGIN_DIR) + "/lib" + name + ".so";
}

std::string refusal(const std::string& name) {
  try {
    PluginLibrary::open(plugin(name));
  } catch (const PluginError& error) {
    return error.what();
  }
  return "loaded";
}

TEST(Plugins, RefusalsNameTheFileTheVersionsAndTheReason) {
  EXPECT_NE(
      refusal("test_plugin_abi_major")
          .find("refused: built for plugin ABI 2.0, this chatflow has ABI 1.1 (the major versions "
                "must be equal"),
      std::string::npos)
      << refusal("test_plugin_abi_major");
  EXPECT_NE(refusal("test_plugin_abi_minor")
                .find("refused: built for plugin ABI 1.8, newer than this chatflow's ABI 1.1"),
            std::string::npos)
      << refusal("test_plugin_abi_minor");
  std::string no_entry = refusal("test_plugin_no_entry");
  EXPECT_NE(no_entry.find("libtest_plugin_no_entry.so: not a chatflow plugin: it has no "
                          "'chatflow_plugin_descriptor' entry point"),
            std::string::npos)
      << no_entry;
  EXPECT_NE(refusal("does_not_exist").find("cannot load the plugin"), std::string::npos);
}

TEST(Plugins, ARefusedPluginIsAnErrorAtItsLineInThePipeline) {
  Diagnostics diagnostics;
  auto spec = check_yaml("version: 1\nplugins:\n  - " + plugin("test_plugin_abi_major") +
                             "\nstages:\n  - {name: echo, type: echo}\n",
                         builtin_registry(), diagnostics);
  EXPECT_FALSE(spec);
  std::string errors = all_errors(diagnostics);
  EXPECT_NE(errors.find("test.yaml:3:5"), std::string::npos) << errors;
  EXPECT_NE(errors.find("built for plugin ABI 2.0"), std::string::npos) << errors;
}

TEST(Plugins, KeywordRouterSendsRequestsToItsPorts) {
  auto pipeline = build_yaml("version: 1\nplugins: [" + plugin("keyword_router") +
                                 "]\nstages:\n"
                                 "  - {name: router, type: keyword_router, config: {keywords: "
                                 "[refund, invoice]}}\n"
                                 "  - {name: billing, type: echo, config: {prefix: 'billing: '}}\n"
                                 "  - {name: general, type: echo, config: {prefix: 'general: '}}\n"
                                 "  - {name: emit, type: sse_emit}\n"
                                 "edges:\n  - router.matched -> billing\n"
                                 "  - router.other -> general\n"
                                 "  - billing.out -> emit\n  - general.out -> emit\n",
                             builtin_registry());
  ASSERT_TRUE(pipeline);
  std::shared_ptr<Request> request;
  EXPECT_EQ(run_text(*pipeline, "I want a Refund now", &request), "billing: I want a Refund now");
  EXPECT_EQ(request->annotation("keyword"), "refund");
  EXPECT_EQ(run_text(*pipeline, "refunds are not words we match"),
            "general: refunds are not words we match");
  EXPECT_EQ(run_text(*pipeline, "where is my invoice?"), "billing: where is my invoice?");
}

TEST(Plugins, ProfanityFilterReplacesWordsSplitAcrossChunks) {
  auto pipeline = build_yaml("version: 1\nplugins: [" + plugin("profanity_filter") +
                                 "]\nstages:\n"
                                 "  - {name: echo, type: echo, config: {words_per_chunk: 1}}\n"
                                 "  - {name: clean, type: profanity_filter, config: {words: "
                                 "[darn, heck]}}\n",
                             builtin_registry());
  ASSERT_TRUE(pipeline);
  std::shared_ptr<Request> request;
  EXPECT_EQ(run_text(*pipeline, "well Darn it, what the heck. Darnell stays", &request),
            "well **** it, what the ****. Darnell stays");
  EXPECT_EQ(request->annotation("profanity"), "1");  // the last emit's count
  EXPECT_EQ(run_text(*pipeline, "nothing to hide"), "nothing to hide");
}

TEST(Plugins, AConfigOfTheWrongTypeIsRefusedWithItsLocation) {
  Diagnostics diagnostics;
  auto spec = check_yaml("version: 1\nplugins: [" + plugin("keyword_router") +
                             "]\nstages:\n"
                             "  - {name: router, type: keyword_router, config: {keywords: [a], "
                             "case_sensitiv: true}}\n"
                             "  - {name: a, type: echo}\n  - {name: b, type: echo}\n"
                             "edges:\n  - router.other -> b\n",
                         builtin_registry(), diagnostics);
  EXPECT_FALSE(spec);
  std::string errors = all_errors(diagnostics);
  EXPECT_NE(errors.find("did you mean 'case_sensitive'"), std::string::npos) << errors;
}

TEST(Plugins, FailingStagesFailTheirRequestAndNothingElse) {
  auto build = [](const std::string& mode) {
    return build_yaml("version: 1\nplugins: [" + plugin("test_plugin_ok") +
                          "]\nstages:\n"
                          "  - {name: t, type: test_thrower, config: {mode: " +
                          mode +
                          "}}\n"
                          "  - {name: echo, type: echo}\n"
                          "  - {name: s, type: test_stream_thrower}\n",
                      builtin_registry());
  };
  struct Case {
    std::string mode;
    int status;
    std::string message;
  };
  for (const Case& expected :
       {Case{"throw", 500, "stage type 'test_thrower' of plugin 'test_plugin' failed: boom"},
        Case{"refuse", 400, "this question is not allowed here"},
        Case{"bad_port", 500, "it chose port 7 of 1"}}) {
    auto pipeline = build(expected.mode);
    ASSERT_TRUE(pipeline);
    std::shared_ptr<Request> request;
    run_text(*pipeline, "hello", &request);
    ASSERT_TRUE(request->error()) << expected.mode;
    EXPECT_EQ(request->error()->status, expected.status) << expected.mode;
    EXPECT_NE(request->error()->message.find(expected.message), std::string::npos)
        << request->error()->message;
  }
  auto pipeline = build("pass");
  ASSERT_TRUE(pipeline);
  std::shared_ptr<Request> request;
  run_text(*pipeline, "please explode now", &request);
  ASSERT_TRUE(request->error());
  EXPECT_NE(request->error()->message.find("stage type 'test_stream_thrower' of plugin "
                                           "'test_plugin' failed: stream boom"),
            std::string::npos)
      << request->error()->message;
  // The same pipeline serves the next request.
  EXPECT_EQ(run_text(*pipeline, "all calm", &request), "all calm");
  EXPECT_FALSE(request->error());
  EXPECT_EQ(request->annotation("thrower"), "passed");
}

}  // namespace
}  // namespace chatflow::testing
