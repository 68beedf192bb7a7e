// Reading YAML into ConfigValue: locations, quoting, duplicate keys, environment interpolation,
// and the limits on what a file may expand to.
#include "framework/text/yaml_reader.h"

#include <cstdlib>

#include <gtest/gtest.h>

namespace chatflow {
namespace {

TEST(ConfigValue, RemembersWhereEveryValueAndKeyIs) {
  Diagnostics diagnostics;
  ConfigValue root =
      read_yaml_text("first: 1\nsecond:\n  - alpha\n  - 'beta'\n", "doc.yaml", diagnostics);
  ASSERT_TRUE(diagnostics.empty()) << diagnostics.to_string();
  ASSERT_TRUE(root.is_mapping());
  ASSERT_EQ(root.keys.size(), 2u);
  EXPECT_EQ(root.keys[0].name, "first");
  EXPECT_EQ(root.keys[1].where.line, 2);
  EXPECT_EQ(root.keys[1].where.column, 1);
  const ConfigValue* list = root.find("second");
  ASSERT_TRUE(list && list->is_sequence());
  EXPECT_EQ(list->items[1].text, "beta");
  EXPECT_EQ(list->items[1].where.to_string(), "doc.yaml:4:5");
  EXPECT_TRUE(list->items[1].quoted);
  EXPECT_FALSE(list->items[0].quoted);
  EXPECT_EQ(root.find("missing"), nullptr);
}

TEST(ConfigValue, EmptyValueIsNull) {
  Diagnostics diagnostics;
  ConfigValue root = read_yaml_text("key:\n", "doc.yaml", diagnostics);
  ASSERT_TRUE(root.find("key"));
  EXPECT_TRUE(root.find("key")->is_null());
}

TEST(ConfigValue, DuplicateKeyIsReportedAtTheSecondOccurrence) {
  Diagnostics diagnostics;
  read_yaml_text("a: 1\nb: 2\na: 3\n", "doc.yaml", diagnostics);
  ASSERT_EQ(diagnostics.size(), 1u);
  EXPECT_EQ(diagnostics.errors()[0].to_string(),
            "doc.yaml:3:1: error: duplicate key 'a' in this mapping");
}

TEST(ConfigValue, NonScalarKeyIsAnError) {
  Diagnostics diagnostics;
  read_yaml_text("? [a, b]\n: value\n", "doc.yaml", diagnostics);
  ASSERT_EQ(diagnostics.size(), 1u);
  EXPECT_NE(diagnostics.errors()[0].message.find("mapping key must be a plain name"),
            std::string::npos);
}

TEST(ConfigValue, SyntaxErrorHasALocationAndNoTree) {
  Diagnostics diagnostics;
  ConfigValue root = read_yaml_text("a: [1, 2\nb: 3\n", "doc.yaml", diagnostics);
  ASSERT_EQ(diagnostics.size(), 1u);
  EXPECT_TRUE(root.is_null());
  EXPECT_GT(diagnostics.errors()[0].where.line, 0);
  EXPECT_EQ(diagnostics.errors()[0].message.rfind("invalid YAML: ", 0), 0u);
}

class Interpolation : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("CHATFLOW_TEST_SET", "value", 1);
    setenv("CHATFLOW_TEST_EMPTY", "", 1);
    unsetenv("CHATFLOW_TEST_UNSET");
  }
  void TearDown() override {
    unsetenv("CHATFLOW_TEST_SET");
    unsetenv("CHATFLOW_TEST_EMPTY");
  }
  std::string interpolate(std::string text) {
    diagnostics_ = Diagnostics();
    interpolate_environment(text, {"f.yaml", 3, 7}, diagnostics_);
    return text;
  }
  Diagnostics diagnostics_;
};

TEST_F(Interpolation, ReplacesSetVariables) {
  EXPECT_EQ(interpolate("${CHATFLOW_TEST_SET}"), "value");
  EXPECT_EQ(interpolate("a-${CHATFLOW_TEST_SET}-b-${CHATFLOW_TEST_SET}"), "a-value-b-value");
  EXPECT_TRUE(diagnostics_.empty());
}

TEST_F(Interpolation, DefaultAppliesWhenUnsetOrEmpty) {
  EXPECT_EQ(interpolate("${CHATFLOW_TEST_UNSET:-fallback}"), "fallback");
  EXPECT_EQ(interpolate("${CHATFLOW_TEST_EMPTY:-fallback}"), "fallback");
  EXPECT_EQ(interpolate("${CHATFLOW_TEST_SET:-fallback}"), "value");
  EXPECT_EQ(interpolate("${CHATFLOW_TEST_UNSET:-}"), "");
  EXPECT_TRUE(diagnostics_.empty());
}

TEST_F(Interpolation, EmptyVariableWithoutDefaultIsEmpty) {
  EXPECT_EQ(interpolate("[${CHATFLOW_TEST_EMPTY}]"), "[]");
  EXPECT_TRUE(diagnostics_.empty());
}

TEST_F(Interpolation, DollarEscapesAndLoneDollarsStay) {
  EXPECT_EQ(interpolate("$$HOME costs $5"), "$HOME costs $5");
  EXPECT_TRUE(diagnostics_.empty());
}

TEST_F(Interpolation, UnsetVariableIsAnErrorNamingIt) {
  interpolate("${CHATFLOW_TEST_UNSET}");
  ASSERT_EQ(diagnostics_.size(), 1u);
  EXPECT_EQ(
      diagnostics_.errors()[0].to_string(),
      "f.yaml:3:7: error: environment variable 'CHATFLOW_TEST_UNSET' is not set (give a default "
      "with ${CHATFLOW_TEST_UNSET:-value})");
}

TEST_F(Interpolation, MalformedReferencesAreErrors) {
  interpolate("${NOT CLOSED");
  ASSERT_EQ(diagnostics_.size(), 1u);
  EXPECT_NE(diagnostics_.errors()[0].message.find("unterminated"), std::string::npos);
  interpolate("${1BAD}");
  ASSERT_EQ(diagnostics_.size(), 1u);
  EXPECT_NE(diagnostics_.errors()[0].message.find("malformed environment reference '${1BAD}'"),
            std::string::npos);
}

}  // namespace
}  // namespace chatflow

namespace chatflow {
namespace {

std::string only_error(const Diagnostics& diagnostics) {
  EXPECT_EQ(diagnostics.errors().size(), 1u) << diagnostics.to_string();
  return diagnostics.errors().empty() ? "" : diagnostics.errors()[0].to_string();
}

TEST(YamlLimits, AnAliasToItsOwnListIsACycleWithItsLocation) {
  Diagnostics diagnostics;
  read_yaml_text("version: 1\nx: &a [*a]\n", "cycle.yaml", diagnostics);
  EXPECT_EQ(only_error(diagnostics),
            "cycle.yaml:2:4: error: invalid YAML: an alias refers to a list or mapping that "
            "contains it (a cycle)");
  Diagnostics nested;
  read_yaml_text("a: &m\n  b:\n    c: *m\n", "cycle.yaml", nested);
  EXPECT_NE(only_error(nested).find("(a cycle)"), std::string::npos);
}

TEST(YamlLimits, AliasesThatExpandPastTheNodeBudgetAreRefused) {
  // Nine levels of ten aliases each: 343 bytes that stand for a billion values.
  std::string text = "a: &a [x,x,x,x,x,x,x,x,x,x]\n";
  for (char level = 'b'; level <= 'i'; ++level) {
    std::string previous(1, static_cast<char>(level - 1));
    text += std::string(1, level) + ": &" + std::string(1, level) + " [";
    for (int i = 0; i < 10; ++i)
      text += (i ? ",*" : "*") + previous;
    text += "]\n";
  }
  Diagnostics diagnostics;
  read_yaml_text(text, "laughs.yaml", diagnostics);
  EXPECT_NE(only_error(diagnostics).find("expands to more than 500000 values"), std::string::npos);
}

TEST(YamlLimits, AliasesWithinTheBudgetStillWork) {
  Diagnostics diagnostics;
  ConfigValue root =
      read_yaml_text("base: &base {rpm: 60}\nacme: *base\nglobex: *base\n", "ok.yaml", diagnostics);
  ASSERT_TRUE(diagnostics.empty()) << diagnostics.to_string();
  EXPECT_EQ(root.find("globex")->find("rpm")->text, "60");
}

TEST(YamlLimits, NestingPastTheDepthLimitNamesTheDepth) {
  Diagnostics diagnostics;
  read_yaml_text(std::string(300, '[') + std::string(300, ']'), "deep.yaml", diagnostics);
  EXPECT_NE(only_error(diagnostics).find("nest deeper than 256 levels"), std::string::npos);
  Diagnostics deeper;
  read_yaml_text(std::string(20000, '[') + std::string(20000, ']'), "deep.yaml", deeper);
  std::string message = only_error(deeper);
  EXPECT_NE(message.find("nest deeper than"), std::string::npos) << message;
  EXPECT_EQ(message.find("bad file"), std::string::npos) << message;
}

TEST(YamlLimits, AFileOverTheSizeLimitIsRefusedWithoutReadingIt) {
  Diagnostics diagnostics;
  read_yaml_text(std::string(kMaxYamlBytes + 1, '#'), "big.yaml", diagnostics);
  EXPECT_NE(only_error(diagnostics).find("YAML files may be at most 8388608"), std::string::npos);
}

}  // namespace
}  // namespace chatflow
