// The serve file's `models:` list and its limits: every key read, paths relative to the serve
// file, `model` as ${CHATFLOW_MODEL}, and each mistake at its file:line:column naming the key.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "framework/server/server_config.h"

namespace chatflow::server {
namespace {

class ServeModelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = std::filesystem::temp_directory_path() /
              ("chatflow-serve-models-" + std::to_string(::getpid()) + "-" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(folder_ / "graphs");
    std::filesystem::create_directories(folder_ / "models");
    std::ofstream(folder_ / "pipeline.yaml") << "version: 1\n";
    std::ofstream(folder_ / "graphs" / "coder.yaml") << "version: 1\n";
    std::ofstream(folder_ / "models" / "small.gguf") << "GGUF";
  }
  void TearDown() override { std::filesystem::remove_all(folder_); }

  std::optional<ServeConfig> load(const std::string& rest) {
    path_ = (folder_ / "serve.yaml").string();
    std::ofstream(path_) << "server: {port: 0}\npipeline: pipeline.yaml\n" << rest;
    diagnostics_ = Diagnostics();
    return load_serve_config(path_, diagnostics_);
  }

  std::string folder(const std::string& file) const {
    return (folder_ / file).lexically_normal().string();
  }

  std::filesystem::path folder_;
  std::string path_;
  Diagnostics diagnostics_;
};

TEST_F(ServeModelsTest, WithoutModelsTheServeFileServesOnePipelineAsBefore) {
  auto config = load("");
  ASSERT_TRUE(config) << diagnostics_.to_string();
  EXPECT_TRUE(config->models.entries.empty());
  EXPECT_EQ(config->models.max_loaded, 0);
}

TEST_F(ServeModelsTest, EveryKeyIsReadAndPathsAreRelativeToTheServeFile) {
  auto config = load(
      "models_max: 2\n"
      "models_memory_mib: 4096\n"
      "models_max_waiters: 8\n"
      "models_load_timeout_s: 30\n"
      "models:\n"
      "  - name: small\n"
      "    aliases: [gpt-4o-mini, mini]\n"
      "    model: models/small.gguf\n"
      "    max_in_flight: 4\n"
      "    ttl_s: 300\n"
      "  - name: coder\n"
      "    pipeline: graphs/coder.yaml\n"
      "    variables: {CODER_TEMPERATURE: '0.2'}\n");
  ASSERT_TRUE(config) << diagnostics_.to_string();
  const ModelsSettings& models = config->models;
  EXPECT_EQ(models.max_loaded, 2);
  EXPECT_EQ(models.memory_budget_mib, 4096);
  EXPECT_EQ(models.max_waiters, 8);
  EXPECT_DOUBLE_EQ(models.load_timeout_s, 30);
  ASSERT_EQ(models.entries.size(), 2u);
  const ModelEntry& small = models.entries[0];
  EXPECT_EQ(small.name, "small");
  EXPECT_EQ(small.aliases, (std::vector<std::string>{"gpt-4o-mini", "mini"}));
  EXPECT_EQ(small.pipeline, folder("pipeline.yaml"));  // the serve file's own
  EXPECT_EQ(small.model, folder("models/small.gguf"));
  EXPECT_EQ(small.variables.at("CHATFLOW_MODEL"), folder("models/small.gguf"));
  EXPECT_EQ(small.max_in_flight, 4);
  EXPECT_DOUBLE_EQ(small.ttl_s, 300);
  const ModelEntry& coder = models.entries[1];
  EXPECT_DOUBLE_EQ(coder.ttl_s, 0);
  EXPECT_EQ(coder.pipeline, folder("graphs/coder.yaml"));
  EXPECT_EQ(coder.variables.at("CODER_TEMPERATURE"), "0.2");
  EXPECT_EQ(coder.variables.count("CHATFLOW_MODEL"), 0u);
}

TEST_F(ServeModelsTest, ANameTakenTwiceIsAnErrorAtTheSecond) {
  EXPECT_FALSE(
      load("models:\n"
           "  - {name: small, aliases: [mini]}\n"
           "  - name: other\n"
           "    aliases: [x, mini]\n"));
  EXPECT_NE(
      diagnostics_.to_string().find(path_ + ":6:18: error: models[1].aliases[1]: the name "
                                            "'mini' is already taken by models[0].aliases[0]"),
      std::string::npos)
      << diagnostics_.to_string();
}

TEST_F(ServeModelsTest, AMissingPipelineOrModelFileIsAnErrorAtItsKey) {
  EXPECT_FALSE(
      load("models:\n"
           "  - name: small\n"
           "    model: models/absent.gguf\n"
           "  - name: coder\n"
           "    pipeline: graphs/absent.yaml\n"));
  std::string text = diagnostics_.to_string();
  EXPECT_NE(text.find(path_ + ":5:12: error: models[0].model: the model file '" +
                      folder("models/absent.gguf") + "' does not exist"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(path_ + ":7:15: error: models[1].pipeline: the pipeline file '" +
                      folder("graphs/absent.yaml") + "' does not exist"),
            std::string::npos)
      << text;
}

TEST_F(ServeModelsTest, AnEntryNeedsAName) {
  EXPECT_FALSE(load("models:\n  - {aliases: [a]}\n"));
  EXPECT_NE(diagnostics_.to_string().find("models[0].name"), std::string::npos)
      << diagnostics_.to_string();
  EXPECT_NE(diagnostics_.to_string().find(path_ + ":4:5"), std::string::npos)
      << diagnostics_.to_string();
}

TEST_F(ServeModelsTest, ModelAndVariablesCannotBothSetTheModel) {
  EXPECT_FALSE(
      load("models:\n"
           "  - name: small\n"
           "    model: models/small.gguf\n"
           "    variables: {CHATFLOW_MODEL: other.gguf}\n"));
  EXPECT_NE(diagnostics_.to_string().find(
                path_ + ":6:16: error: models[0].variables sets CHATFLOW_MODEL, which `model` "
                        "sets too"),
            std::string::npos)
      << diagnostics_.to_string();
}

TEST_F(ServeModelsTest, ALimitWithoutModelsIsAnError) {
  EXPECT_FALSE(load("models_max: 1\n"));
  EXPECT_NE(diagnostics_.to_string().find(path_ + ":3:13: error: models_max is set but there is "
                                                  "no 'models:' list"),
            std::string::npos)
      << diagnostics_.to_string();
}

TEST_F(ServeModelsTest, LimitsOutOfRangeAreErrorsNamingTheKey) {
  EXPECT_FALSE(load("models_load_timeout_s: 0\nmodels: [{name: a}]\n"));
  EXPECT_NE(diagnostics_.to_string().find(path_ + ":3:"), std::string::npos)
      << diagnostics_.to_string();
  EXPECT_NE(diagnostics_.to_string().find("models_load_timeout_s"), std::string::npos)
      << diagnostics_.to_string();
}

}  // namespace
}  // namespace chatflow::server
