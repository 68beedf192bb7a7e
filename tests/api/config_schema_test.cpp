// Config schemas: struct defaults, typed parsing, constraints, nested objects, references.
#include "framework/api/config_schema.h"

#include <gtest/gtest.h>

#include "framework/text/yaml_reader.h"

namespace chatflow {
namespace {

struct CacheSettings {
  int block_tokens = 16;
  bool prefix_cache = true;
};

struct ModelSettings {
  std::string path;
  std::string backend = "auto";
  double temperature = 0.7;
  int32_t max_seqs = 64;
  std::vector<std::string> stop = {"</s>"};
  std::map<std::string, std::string> labels;
  CacheSettings kv_cache;
  std::string store;
};

std::shared_ptr<const ConfigSchema> model_schema() {
  SchemaBuilder<CacheSettings> cache;
  cache.key("block_tokens", &CacheSettings::block_tokens, "tokens per block").range(1, 1024);
  cache.key("prefix_cache", &CacheSettings::prefix_cache, "share prefixes");
  SchemaBuilder<ModelSettings> schema;
  schema.key("path", &ModelSettings::path, "GGUF file").required();
  schema.key("backend", &ModelSettings::backend, "where to run").choices({"cpu", "cuda", "auto"});
  schema.key("temperature", &ModelSettings::temperature, "sampling temperature").range(0, 2);
  schema.key("max_seqs", &ModelSettings::max_seqs, "sequences per step").at_least(1);
  schema.key("stop", &ModelSettings::stop, "stop strings");
  schema.key("labels", &ModelSettings::labels, "free-form labels");
  schema.object("kv_cache", &ModelSettings::kv_cache, cache, "KV cache settings");
  schema.key("store", &ModelSettings::store, "a store").resource("sqlite_store");
  return schema.schema();
}

class SchemaParse : public ::testing::Test {
 protected:
  ModelSettings parse(const std::string& yaml) {
    ConfigValue root = read_yaml_text(yaml, "m.yaml", diagnostics_);
    ParseContext context{diagnostics_, "resource 'llm' (gguf_model)", &references_, {}};
    auto config = model_schema()->parse(&root, {"m.yaml", 1, 1}, context);
    return *std::static_pointer_cast<ModelSettings>(config);
  }
  Diagnostics diagnostics_;
  std::vector<ResourceReference> references_;
};

TEST_F(SchemaParse, AbsentKeysKeepTheStructDefaults) {
  ModelSettings settings = parse("path: model.gguf\n");
  ASSERT_TRUE(diagnostics_.empty()) << diagnostics_.to_string();
  EXPECT_EQ(settings.path, "model.gguf");
  EXPECT_EQ(settings.backend, "auto");
  EXPECT_DOUBLE_EQ(settings.temperature, 0.7);
  EXPECT_EQ(settings.max_seqs, 64);
  EXPECT_EQ(settings.stop, std::vector<std::string>{"</s>"});
  EXPECT_EQ(settings.kv_cache.block_tokens, 16);
  EXPECT_TRUE(settings.kv_cache.prefix_cache);
}

TEST_F(SchemaParse, EveryFieldTypeIsRead) {
  ModelSettings settings = parse(R"(path: m.gguf
backend: cuda
temperature: 1.25
max_seqs: 8
stop: ["\n\n", "User:"]
labels: {team: search, tier: "2"}
kv_cache: {block_tokens: 32, prefix_cache: false}
store: history
)");
  ASSERT_TRUE(diagnostics_.empty()) << diagnostics_.to_string();
  EXPECT_EQ(settings.backend, "cuda");
  EXPECT_DOUBLE_EQ(settings.temperature, 1.25);
  EXPECT_EQ(settings.max_seqs, 8);
  EXPECT_EQ(settings.stop, (std::vector<std::string>{"\n\n", "User:"}));
  EXPECT_EQ(settings.labels.at("tier"), "2");
  EXPECT_EQ(settings.kv_cache.block_tokens, 32);
  EXPECT_FALSE(settings.kv_cache.prefix_cache);
  ASSERT_EQ(references_.size(), 1u);
  EXPECT_EQ(references_[0].resource_name, "history");
  EXPECT_EQ(references_[0].resource_type, "sqlite_store");
  EXPECT_EQ(references_[0].where.to_string(), "m.yaml:8:8");
}

TEST_F(SchemaParse, DocumentedDefaultsComeFromTheStruct) {
  auto schema = model_schema();
  EXPECT_EQ(schema->find("backend")->default_text, "\"auto\"");
  EXPECT_EQ(schema->find("max_seqs")->default_text, "64");
  EXPECT_EQ(schema->find("stop")->default_text, "[</s>]");
  EXPECT_EQ(schema->find("path")->default_text, "") << "required keys have no default";
  EXPECT_EQ(schema->find("kv_cache")->nested->find("block_tokens")->default_text, "16");
}

TEST_F(SchemaParse, ChoicesAreEnforcedWithASuggestion) {
  parse("path: m\nbackend: cdua\n");
  ASSERT_EQ(diagnostics_.size(), 1u);
  EXPECT_EQ(diagnostics_.errors()[0].to_string(),
            "m.yaml:2:10: error: resource 'llm' (gguf_model): key 'backend' must be one of cpu, "
            "cuda, auto, "
            "got \"cdua\"; did you mean 'cuda'?");
}

TEST_F(SchemaParse, RangesAreEnforced) {
  parse("path: m\ntemperature: 2.5\nmax_seqs: 0\n");
  ASSERT_EQ(diagnostics_.size(), 2u);
  EXPECT_NE(
      diagnostics_.errors()[0].message.find("key 'temperature' must be between 0 and 2, got 2.5"),
      std::string::npos);
  EXPECT_NE(diagnostics_.errors()[1].message.find("key 'max_seqs' must be at least 1, got 0"),
            std::string::npos);
}

struct Bounded {
  int64_t tokens = 16;
  double timeout_s = 1;
};

TEST(SchemaRange, BoundsArePrintedAsWrittenNotInScientificNotation) {
  SchemaBuilder<Bounded> schema;
  schema.key("tokens", &Bounded::tokens, "tokens").range(16, 1 << 20);
  schema.key("timeout_s", &Bounded::timeout_s, "seconds").range(0.001, 3600);
  Diagnostics diagnostics;
  ConfigValue root = read_yaml_text("tokens: 2000000\ntimeout_s: 0\n", "b.yaml", diagnostics);
  ParseContext context{diagnostics, "", nullptr, {}};
  schema.schema()->parse(&root, {"b.yaml", 1, 1}, context);
  ASSERT_EQ(diagnostics.size(), 2u);
  EXPECT_EQ(diagnostics.errors()[0].message,
            "key 'tokens' must be between 16 and 1048576, got 2000000");
  EXPECT_EQ(diagnostics.errors()[1].message,
            "key 'timeout_s' must be between 0.001 and 3600, got 0");
}

TEST_F(SchemaParse, IntegerOverflowOfTheFieldTypeIsAnError) {
  parse("path: m\nmax_seqs: 3000000000\n");
  ASSERT_EQ(diagnostics_.size(), 1u);
  EXPECT_NE(diagnostics_.errors()[0].message.find("key 'max_seqs' is out of range: 3000000000"),
            std::string::npos);
}

TEST_F(SchemaParse, NestedKeysAreNamedWithTheirPath) {
  parse("path: m\nkv_cache: {block_tokns: 4, prefix_cache: yes}\n");
  ASSERT_EQ(diagnostics_.size(), 2u) << diagnostics_.to_string();
  EXPECT_NE(diagnostics_.errors()[0].message.find(
                "unknown key 'kv_cache.block_tokns'; did you mean 'block_tokens'?"),
            std::string::npos);
  EXPECT_NE(diagnostics_.errors()[1].message.find(
                "key 'kv_cache.prefix_cache' expects true or false, got \"yes\""),
            std::string::npos);
}

TEST_F(SchemaParse, MissingRequiredKeyIsReportedAtTheMapping) {
  parse("backend: cpu\n");
  ASSERT_EQ(diagnostics_.size(), 1u);
  EXPECT_EQ(diagnostics_.errors()[0].where.to_string(), "m.yaml:1:1");
  EXPECT_NE(
      diagnostics_.errors()[0].message.find("missing required key 'path' (a string: GGUF file)"),
      std::string::npos);
}

TEST_F(SchemaParse, ListAndMapItemsMustBeScalars) {
  parse("path: m\nstop: [[a]]\nlabels: {a: [1]}\n");
  ASSERT_EQ(diagnostics_.size(), 2u);
  EXPECT_EQ(diagnostics_.errors()[0].where.to_string(), "m.yaml:2:8");
  EXPECT_EQ(diagnostics_.errors()[1].where.to_string(), "m.yaml:3:13");
}

TEST_F(SchemaParse, ConfigThatIsNotAMappingIsRefused) {
  Diagnostics diagnostics;
  ConfigValue root = read_yaml_text("[1, 2]\n", "m.yaml", diagnostics);
  ParseContext context{diagnostics, "stage 'x' (y)", nullptr, {}};
  model_schema()->parse(&root, {"m.yaml", 1, 1}, context);
  ASSERT_EQ(diagnostics.size(), 1u);
  EXPECT_NE(diagnostics.errors()[0].message.find("expected a mapping of config keys, got a list"),
            std::string::npos);
}

struct ToolItem {
  std::string name;
  CacheSettings limits;
  ConfigValue parameters;
};

struct ToolSettings {
  std::vector<ToolItem> tools;
};

class ListParse : public ::testing::Test {
 protected:
  ToolSettings parse(const std::string& yaml) {
    SchemaBuilder<CacheSettings> limits;
    limits.key("block_tokens", &CacheSettings::block_tokens, "tokens per block").range(1, 1024);
    SchemaBuilder<ToolItem> item;
    item.key("name", &ToolItem::name, "the name").required();
    item.object("limits", &ToolItem::limits, limits, "limits");
    item.key("parameters", &ToolItem::parameters, "free-form");
    SchemaBuilder<ToolSettings> schema;
    schema.list("tools", &ToolSettings::tools, item, "the tools");
    ConfigValue root = read_yaml_text(yaml, "t.yaml", diagnostics_);
    ParseContext context{diagnostics_, "stage 'a' (agent)", nullptr, {}};
    auto config = schema.schema()->parse(&root, {"t.yaml", 1, 1}, context);
    return *std::static_pointer_cast<ToolSettings>(config);
  }
  Diagnostics diagnostics_;
};

TEST_F(ListParse, EachItemIsReadWithTheNestedSchemaAndFreeValuesKeepTheirTree) {
  ToolSettings settings = parse(R"(tools:
  - {name: a, limits: {block_tokens: 8}, parameters: {type: object, required: [x]}}
  - {name: b}
)");
  ASSERT_TRUE(diagnostics_.empty()) << diagnostics_.to_string();
  ASSERT_EQ(settings.tools.size(), 2u);
  EXPECT_EQ(settings.tools[0].name, "a");
  EXPECT_EQ(settings.tools[0].limits.block_tokens, 8);
  ASSERT_TRUE(settings.tools[0].parameters.is_mapping());
  EXPECT_EQ(settings.tools[0].parameters.find("type")->text, "object");
  EXPECT_TRUE(settings.tools[0].parameters.find("required")->is_sequence());
  EXPECT_EQ(settings.tools[1].limits.block_tokens, 16);
  EXPECT_TRUE(settings.tools[1].parameters.is_null());
}

TEST_F(ListParse, ErrorsNameTheItemAndItsLocation) {
  parse("tools:\n  - {name: a}\n  - {limits: {block_tokens: 0, typo: 1}}\n");
  std::string all = diagnostics_.to_string();
  ASSERT_EQ(diagnostics_.size(), 3u) << all;
  EXPECT_NE(all.find("t.yaml:3:32: error: stage 'a' (agent): unknown key 'tools[1].limits.typo'"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("key 'tools[1].limits.block_tokens' must be between 1 and 1024"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("missing required key 'tools[1].name'"), std::string::npos) << all;
}

TEST_F(ListParse, AListOfMappingsIsRequired) {
  parse("tools: {name: a}\n");
  ASSERT_EQ(diagnostics_.size(), 1u);
  EXPECT_NE(diagnostics_.errors()[0].message.find("key 'tools' expects a list of mappings"),
            std::string::npos);
}

}  // namespace
}  // namespace chatflow
