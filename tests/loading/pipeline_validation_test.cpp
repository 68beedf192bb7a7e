// Every class of pipeline error is reported with the file, line and column where it is, and all
// errors of a file are reported together. Line and column numbers below are read off the YAML
// text in each test (1-based).
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "support/pipeline_helpers.h"
#include "support/test_stages.h"

namespace chatflow::testing {
namespace {

class PipelineValidation : public ::testing::Test {
 protected:
  // Checks `yaml` and returns the errors; the spec must have been refused.
  Diagnostics errors_of(const std::string& yaml) {
    Diagnostics diagnostics;
    auto spec = check_yaml(yaml, registry_, diagnostics);
    EXPECT_FALSE(spec.has_value()) << "expected errors, got a valid pipeline";
    EXPECT_FALSE(diagnostics.empty());
    return diagnostics;
  }

  Registry registry_ = test_registry();
};

// True when some error sits exactly at line:column and its message contains `text`.
::testing::AssertionResult has_error(const Diagnostics& diagnostics, int line, int column,
                                     const std::string& text) {
  for (const auto& error : diagnostics.errors()) {
    if (error.where.line == line && error.where.column == column &&
        error.message.find(text) != std::string::npos) {
      return ::testing::AssertionSuccess();
    }
  }
  return ::testing::AssertionFailure()
         << "no error at " << line << ":" << column << " containing '" << text << "'; got:\n"
         << diagnostics.to_string();
}

TEST_F(PipelineValidation, AcceptsAValidPipeline) {
  Diagnostics diagnostics;
  auto spec = check_yaml(R"(version: 1
name: ok
stages:
  - {name: a, type: pass}
  - {name: gen, type: generate, config: {chunks: 2}}
  - {name: tail, type: append, config: {suffix: "!"}}
)",
                         registry_, diagnostics);
  ASSERT_TRUE(spec) << diagnostics.to_string();
  EXPECT_EQ(spec->name, "ok");
  ASSERT_EQ(spec->stages.size(), 3u);
  // List order: a -> gen -> tail -> sink.
  ASSERT_EQ(spec->connections.size(), 3u);
  EXPECT_EQ(spec->connection_from(0, 0)->to_stage, 1u);
  EXPECT_EQ(spec->connection_from(1, 0)->to_stage, 2u);
  EXPECT_EQ(spec->connection_from(2, 0)->to_stage, kSinkStage);
}

TEST_F(PipelineValidation, YamlSyntaxErrorPointsAtTheBadLine) {
  auto errors = errors_of(R"(version: 1
stages:
  - name: a
   type: pass
)");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors.errors()[0].where.line, 4);
  EXPECT_NE(errors.errors()[0].message.find("invalid YAML"), std::string::npos);
  EXPECT_EQ(errors.errors()[0].where.file, "test.yaml");
}

TEST_F(PipelineValidation, DuplicateYamlKeyIsAnError) {
  auto errors = errors_of(R"(version: 1
stages:
  - {name: a, type: pass, type: generate}
)");
  EXPECT_TRUE(has_error(errors, 3, 27, "duplicate key 'type'"));
}

TEST_F(PipelineValidation, MissingOrWrongVersion) {
  EXPECT_TRUE(has_error(errors_of("stages:\n  - {name: a, type: generate}\n"), 1, 1,
                        "missing required key 'version'"));
  EXPECT_TRUE(has_error(errors_of("version: 2\nstages:\n  - {name: a, type: generate}\n"), 1, 10,
                        "unsupported pipeline version"));
}

TEST_F(PipelineValidation, UnknownTopLevelKeySuggestsTheRightOne) {
  auto errors = errors_of(R"(version: 1
stagse:
  - {name: a, type: generate}
)");
  EXPECT_TRUE(has_error(errors, 2, 1, "unknown top-level key 'stagse'; did you mean 'stages'?"));
  EXPECT_TRUE(has_error(errors, 1, 1, "missing required key 'stages'"));
}

TEST_F(PipelineValidation, UnknownStageTypeSuggestsAKnownType) {
  auto errors = errors_of(R"(version: 1
stages:
  - {name: a, type: pas}
  - {name: g, type: generate}
)");
  EXPECT_TRUE(
      has_error(errors, 3, 21, "stage 'a': unknown stage type 'pas'; did you mean 'pass'?"));
}

TEST_F(PipelineValidation, UnknownStageKeySuggestsConfig) {
  auto errors = errors_of(R"(version: 1
stages:
  - name: g
    type: generate
    confg: {chunks: 2}
)");
  EXPECT_TRUE(has_error(errors, 5, 5, "unknown stage key 'confg'; did you mean 'config'?"));
}

TEST_F(PipelineValidation, UnknownConfigKeyNamesStageAndSuggestsKey) {
  auto errors = errors_of(R"(version: 1
stages:
  - name: a
    type: pass
    config:
      fail_onn: boom
  - {name: g, type: generate}
)");
  EXPECT_TRUE(
      has_error(errors, 6, 7, "stage 'a' (pass): unknown key 'fail_onn'; did you mean 'fail_on'?"));
}

TEST_F(PipelineValidation, WrongValueTypesAreReportedAtTheValue) {
  auto errors = errors_of(R"(version: 1
stages:
  - {name: a, type: pass, config: {wait_at_gate: maybe}}
  - {name: g, type: generate, config: {chunks: many}}
  - {name: t, type: append, config: {suffix: [x, y]}}
)");
  EXPECT_TRUE(has_error(errors, 3, 50, "key 'wait_at_gate' expects true or false, got \"maybe\""));
  EXPECT_TRUE(has_error(errors, 4, 48, "key 'chunks' expects an integer, got \"many\""));
  EXPECT_TRUE(has_error(errors, 5, 46, "key 'suffix' expects a string, got a list"));
  EXPECT_EQ(errors.size(), 3u) << errors.to_string();
}

TEST_F(PipelineValidation, QuotedNumberIsNotAnInteger) {
  auto errors = errors_of(R"(version: 1
stages:
  - {name: g, type: generate, config: {chunks: "5"}}
)");
  EXPECT_TRUE(has_error(errors, 3, 48, "expects an integer, got the quoted string \"5\""));
}

TEST_F(PipelineValidation, OutOfRangeValueNamesTheRange) {
  auto errors = errors_of(R"(version: 1
stages:
  - {name: g, type: generate, config: {chunks: -1}}
)");
  EXPECT_TRUE(has_error(errors, 3, 48, "key 'chunks' must be between 0 and 100000, got -1"));
}

TEST_F(PipelineValidation, MissingRequiredConfigKey) {
  auto errors = errors_of(R"(version: 1
stages:
  - {name: g, type: generate}
  - {name: t, type: append}
)");
  EXPECT_TRUE(has_error(errors, 4, 5, "stage 't' (append): missing required key 'suffix'"));
}

TEST_F(PipelineValidation, UnsetEnvironmentVariableIsReportedWithItsName) {
  unsetenv("CHATFLOW_TEST_UNSET_VARIABLE");
  auto errors = errors_of(R"(version: 1
stages:
  - {name: g, type: generate}
  - {name: t, type: append, config: {suffix: "${CHATFLOW_TEST_UNSET_VARIABLE}"}}
)");
  EXPECT_TRUE(
      has_error(errors, 4, 46, "environment variable 'CHATFLOW_TEST_UNSET_VARIABLE' is not set"));
  EXPECT_EQ(errors.size(), 1u) << "no follow-on errors from the failed value:\n"
                               << errors.to_string();
}

TEST_F(PipelineValidation, EnvironmentDefaultsAndValuesAreInterpolated) {
  setenv("CHATFLOW_TEST_CHUNKS", "7", 1);
  unsetenv("CHATFLOW_TEST_SUFFIX");
  Diagnostics diagnostics;
  // Flow style needs the quotes; the interpolated value is typed by its text all the same.
  auto spec = check_yaml(R"(version: 1
stages:
  - {name: g, type: generate, config: {chunks: "${CHATFLOW_TEST_CHUNKS}"}}
  - name: t
    type: append
    config:
      suffix: ${CHATFLOW_TEST_SUFFIX:-.}$$
)",
                         registry_, diagnostics);
  ASSERT_TRUE(spec) << diagnostics.to_string();
  unsetenv("CHATFLOW_TEST_CHUNKS");
  auto pipeline = Pipeline::build(std::move(*spec), diagnostics);
  ASSERT_TRUE(pipeline) << diagnostics.to_string();
  std::shared_ptr<CollectingSink> sink;
  ASSERT_EQ(pipeline->submit(user_request("x", sink)), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  // Seven chunks from `generate`, each with the default suffix "." and the literal "$".
  EXPECT_EQ(sink->text(), "t0 .$0|t1 .$1|t2 .$2|t3 .$3|t4 .$4|t5 .$5|t6 .$6|");
}

TEST_F(PipelineValidation, InvalidConcurrency) {
  auto errors = errors_of(R"(version: 1
stages:
  - {name: g, type: generate, concurrency: lots}
)");
  EXPECT_TRUE(
      has_error(errors, 3, 44, "'concurrency' must be serial, unlimited or a positive integer"));
}

TEST_F(PipelineValidation, DuplicateStageNames) {
  auto errors = errors_of(R"(version: 1
stages:
  - {name: a, type: pass}
  - {name: a, type: generate}
)");
  EXPECT_TRUE(has_error(errors, 4, 5, "stage name 'a' is used twice"));
}

TEST_F(PipelineValidation, EdgeToUnknownStageSuggestsAName) {
  auto errors = errors_of(R"(version: 1
stages:
  - {name: check, type: branch}
  - {name: gen, type: generate}
  - {name: tail, type: append, config: {suffix: x}}
edges:
  - check.hit -> tial
)");
  EXPECT_TRUE(has_error(errors, 7, 18, "edge names unknown stage 'tial'; did you mean 'tail'?"));
}

TEST_F(PipelineValidation, EdgeFromUnknownPortListsThePorts) {
  auto errors = errors_of(R"(version: 1
stages:
  - {name: check, type: branch}
  - {name: gen, type: generate}
  - {name: tail, type: append, config: {suffix: x}}
edges:
  - check.hits -> tail
)");
  EXPECT_TRUE(has_error(
      errors, 7, 11,
      "stage 'check' (branch) has no port 'hits'; did you mean 'hit'? (its ports: miss, hit)"));
}

TEST_F(PipelineValidation, MalformedEdge) {
  auto errors = errors_of(R"(version: 1
stages:
  - {name: gen, type: generate}
edges:
  - gen.out => gen
)");
  EXPECT_TRUE(
      has_error(errors, 5, 5, "malformed edge 'gen.out => gen': expected 'stage.port -> stage'"));
}

TEST_F(PipelineValidation, PortFeedsOnlyOneStage) {
  auto errors = errors_of(R"(version: 1
stages:
  - {name: a, type: pass}
  - {name: b, type: pass}
  - {name: gen, type: generate}
edges:
  - a.out -> b
  - a.out -> gen
)");
  EXPECT_TRUE(has_error(errors, 8, 5, "port 'a.out' is already connected (at test.yaml:7:5)"));
}

TEST_F(PipelineValidation, CycleIsReportedAtTheClosingConnection) {
  auto errors = errors_of(R"(version: 1
stages:
  - {name: a, type: pass}
  - {name: b, type: pass}
  - {name: gen, type: generate}
edges:
  - a.out -> b
  - b.out -> a
)");
  EXPECT_TRUE(has_error(errors, 8, 5, "closes a cycle: a -> b -> a"));
}

TEST_F(PipelineValidation, UnreachableStage) {
  auto errors = errors_of(R"(version: 1
stages:
  - {name: a, type: pass}
  - {name: lonely, type: pass}
  - {name: gen, type: generate}
edges:
  - a.out -> gen
  - lonely.out -> gen
)");
  EXPECT_TRUE(
      has_error(errors, 4, 5, "stage 'lonely' (pass) is never reached from the first stage 'a'"));
}

TEST_F(PipelineValidation, UnconnectedPortIsReported) {
  auto errors = errors_of(R"(version: 1
stages:
  - {name: route, type: router}
  - {name: gen_a, type: generate}
  - {name: gen_b, type: generate}
edges:
  - route.a -> gen_a
  - route.b -> gen_b
  - gen_a -> sink
)");
  EXPECT_TRUE(has_error(errors, 3, 5, "port 'route.c' of stage 'route' (router) is not connected"));
  EXPECT_EQ(errors.size(), 1u) << errors.to_string();
}

TEST_F(PipelineValidation, StreamStageBeforeTheStreamStarts) {
  auto errors = errors_of(R"(version: 1
stages:
  - {name: a, type: pass}
  - {name: tail, type: append, config: {suffix: x}}
  - {name: gen, type: generate}
)");
  EXPECT_TRUE(has_error(errors, 3, 5,
                        "stage 'tail' (append) is a stream stage placed before the stream starts"));
}

TEST_F(PipelineValidation, RequestStageAfterTheStreamStarted) {
  auto errors = errors_of(R"(version: 1
stages:
  - {name: gen, type: generate}
  - {name: late, type: pass}
)");
  EXPECT_TRUE(has_error(errors, 3, 5,
                        "stage 'late' (pass) is a request stage placed after the stream started"));
}

TEST_F(PipelineValidation, PipelineMustStartWithARequestStage) {
  auto errors = errors_of(R"(version: 1
stages:
  - {name: tail, type: append, config: {suffix: x}}
)");
  EXPECT_TRUE(has_error(errors, 3, 5, "cannot be the first stage"));
}

TEST_F(PipelineValidation, ResourceReferencesAreChecked) {
  auto errors = errors_of(R"(version: 1
resources:
  db: {type: store, path: /tmp/x}
  thing: {type: other}
stages:
  - {name: u1, type: use_store, config: {store: dbb}}
  - {name: u2, type: use_store, config: {store: thing}}
  - {name: gen, type: generate}
)");
  EXPECT_TRUE(has_error(errors, 6, 49,
                        "key 'store' names resource 'dbb', which is not declared under "
                        "'resources:'; did you mean 'db'?"));
  EXPECT_TRUE(has_error(
      errors, 7, 49, "key 'store' needs a resource of type store, but 'thing' is of type other"));
}

TEST_F(PipelineValidation, UnknownResourceTypeAndKeys) {
  auto errors = errors_of(R"(version: 1
resources:
  db: {type: stor, path: /tmp/x}
  db2: {type: store, paht: /tmp/x}
stages:
  - {name: gen, type: generate}
)");
  EXPECT_TRUE(has_error(errors, 3, 14,
                        "resource 'db': unknown resource type 'stor'; did you mean 'store'?"));
  EXPECT_TRUE(
      has_error(errors, 4, 22, "resource 'db2' (store): unknown key 'paht'; did you mean 'path'?"));
  EXPECT_TRUE(has_error(errors, 4, 8, "resource 'db2' (store): missing required key 'path'"));
}

TEST_F(PipelineValidation, EveryErrorOfAFileIsReportedAtOnce) {
  auto errors = errors_of(R"(version: 1
stages:
  - {name: a, type: pass, config: {fail_onn: x}}
  - {name: b, type: nonexistent}
  - {name: g, type: generate, config: {chunks: lots}}
)");
  EXPECT_TRUE(has_error(errors, 3, 36, "unknown key 'fail_onn'"));
  EXPECT_TRUE(has_error(errors, 4, 21, "unknown stage type 'nonexistent'"));
  EXPECT_TRUE(has_error(errors, 5, 48, "expects an integer"));
  EXPECT_EQ(errors.size(), 3u) << errors.to_string();
}

TEST_F(PipelineValidation, AMissingPluginIsNamedAtItsEntry) {
  auto errors = errors_of(R"(version: 1
plugins: [libmissing.so]
stages:
  - {name: g, type: generate}
)");
  EXPECT_TRUE(has_error(errors, 2, 11, "libmissing.so: cannot load the plugin: "));
}

TEST_F(PipelineValidation, EmptyStagesAndNonMappingDocument) {
  EXPECT_TRUE(has_error(errors_of("version: 1\nstages: []\n"), 2, 9, "'stages' is empty"));
  EXPECT_TRUE(
      has_error(errors_of("- just\n- a list\n"), 1, 1, "a pipeline file must be a mapping"));
}

TEST(PipelineFiles, MissingFileAndDirectoryAreClearErrors) {
  Registry registry = test_registry();
  Diagnostics missing;
  EXPECT_FALSE(load_pipeline_spec("/nonexistent/pipeline.yaml", registry, missing));
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_EQ(missing.errors()[0].to_string(),
            "/nonexistent/pipeline.yaml: error: cannot open file: No such file or directory");
  Diagnostics directory;
  EXPECT_FALSE(
      load_pipeline_spec(std::filesystem::temp_directory_path().string(), registry, directory));
  ASSERT_EQ(directory.size(), 1u);
  EXPECT_NE(directory.errors()[0].message.find("is a directory"), std::string::npos);
}

TEST(PipelineFiles, ErrorsNameTheFileTheyCameFrom) {
  auto path = std::filesystem::temp_directory_path() / "chatflow_validation_test.yaml";
  std::ofstream(path) << "version: 1\nstages:\n  - {name: a, type: nope}\n";
  Registry registry = test_registry();
  Diagnostics diagnostics;
  EXPECT_FALSE(load_pipeline_spec(path.string(), registry, diagnostics));
  ASSERT_EQ(diagnostics.size(), 1u);
  EXPECT_EQ(diagnostics.errors()[0].to_string().rfind(
                path.string() + ":3:21: error: stage 'a': unknown stage type", 0),
            0u)
      << diagnostics.to_string();
  std::filesystem::remove(path);
}

TEST(PipelineBuild, FactoryErrorIsReportedAtTheResourceAndNothingIsBuilt) {
  Registry registry = test_registry();
  Diagnostics diagnostics;
  auto spec = check_yaml(R"(version: 1
resources:
  db: {type: store, path: missing}
stages:
  - {name: u, type: use_store, config: {store: db}}
  - {name: gen, type: generate}
)",
                         registry, diagnostics);
  ASSERT_TRUE(spec) << diagnostics.to_string();
  auto pipeline = Pipeline::build(std::move(*spec), diagnostics);
  EXPECT_EQ(pipeline, nullptr);
  EXPECT_TRUE(has_error(diagnostics, 3, 3, "resource 'db' (store): cannot open 'missing'"));
}

}  // namespace
}  // namespace chatflow::testing
