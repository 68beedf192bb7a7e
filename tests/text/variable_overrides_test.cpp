// ScopedVariables: a serve file's `models:` entry reads one pipeline file with its own
// ${CHATFLOW_MODEL}, on its own thread, without the environment changing for anyone else.
#include "framework/text/variable_overrides.h"

#include <cstdlib>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "framework/text/yaml_reader.h"

namespace chatflow {
namespace {

std::string interpolated(std::string text) {
  Diagnostics diagnostics;
  interpolate_environment(text, {"f.yaml", 1, 1}, diagnostics);
  return diagnostics.empty() ? text : "error: " + diagnostics.to_string();
}

TEST(ScopedVariables, TakePrecedenceOverTheEnvironmentWhileTheyLive) {
  setenv("CHATFLOW_TEST_MODEL_FILE", "from-environment.gguf", 1);
  {
    std::map<std::string, std::string> variables{{"CHATFLOW_TEST_MODEL_FILE", "entry.gguf"}};
    ScopedVariables scope(variables);
    EXPECT_EQ(interpolated("path: ${CHATFLOW_TEST_MODEL_FILE}"), "path: entry.gguf");
    // A variable the scope does not name still comes from the environment or its default.
    EXPECT_EQ(interpolated("${CHATFLOW_TEST_NOT_SET_ANYWHERE:-fallback}"), "fallback");
  }
  EXPECT_EQ(interpolated("${CHATFLOW_TEST_MODEL_FILE}"), "from-environment.gguf");
  unsetenv("CHATFLOW_TEST_MODEL_FILE");
}

TEST(ScopedVariables, ReplaceADefaultAndAnUnsetVariable) {
  std::map<std::string, std::string> variables{{"CHATFLOW_TEST_ONLY_IN_SCOPE", "b.gguf"}};
  ScopedVariables scope(variables);
  EXPECT_EQ(interpolated("${CHATFLOW_TEST_ONLY_IN_SCOPE:-auto}"), "b.gguf");
  EXPECT_EQ(interpolated("${CHATFLOW_TEST_ONLY_IN_SCOPE}"), "b.gguf");
}

TEST(ScopedVariables, AreSeenOnlyByTheThreadThatSetThem) {
  std::map<std::string, std::string> variables{{"CHATFLOW_TEST_ONLY_IN_SCOPE", "b.gguf"}};
  ScopedVariables scope(variables);
  std::string elsewhere;
  std::thread other([&] { elsewhere = interpolated("${CHATFLOW_TEST_ONLY_IN_SCOPE:-auto}"); });
  other.join();
  EXPECT_EQ(elsewhere, "auto");
}

}  // namespace
}  // namespace chatflow
