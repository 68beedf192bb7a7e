// gguf_model's chat_template setting: a Jinja file runs through the interpreter, its load errors
// are configuration errors with line and column, a template that raises is the request's 400
// with the template's message, and chat_template_kwargs reach the template as variables.
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include <gtest/gtest.h>

#include "stages/gguf_model.h"
#include "support/temp_model.h"

namespace chatflow {
namespace {

// The templates go in one folder per test process, removed when it ends.
const std::filesystem::path& template_folder() {
  static const struct Folder {
    std::filesystem::path path = std::filesystem::temp_directory_path() /
                                 ("chatflow-templates-" + std::to_string(::getpid()));
    Folder() { std::filesystem::create_directories(path); }
    ~Folder() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } folder;
  return folder.path;
}

std::string write_template(const std::string& name, const std::string& text) {
  auto path = template_folder() / name;
  std::ofstream(path) << text;
  return path.string();
}

std::shared_ptr<GgufModel> model_with_template(const std::string& chat_template) {
  engine::ModelShape shape;
  shape.layers = 1;
  GgufModelConfig settings;
  settings.path = testing::temp_model(shape);
  settings.chat_template = chat_template;
  return std::make_shared<GgufModel>(settings);
}

std::unique_ptr<Request> chat(std::vector<Message> messages) {
  auto request = std::make_unique<Request>();
  request->kind = RequestKind::chat;
  request->messages = std::move(messages);
  return request;
}

TEST(GgufModelChatTemplate, AJinjaFileRendersThePrompt) {
  auto model = model_with_template(write_template(
      "plain.jinja", "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"));
  EXPECT_TRUE(model->chat_format().is_jinja());
  auto tokens = model->encode_prompt(*chat({{"user", "hi"}}), true);
  std::string text = model->detokenize(tokens);
  EXPECT_NE(text.find("[user] hi\n"), std::string::npos) << text;
}

TEST(GgufModelChatTemplate, ATemplateThatRaisesIsA400WithItsMessage) {
  auto model = model_with_template(
      write_template("raises.jinja",
                     "{% if messages[0].role != 'system' %}{{ raise_exception('a system message "
                     "must come first') }}{% endif %}"));
  try {
    model->encode_prompt(*chat({{"user", "hi"}}), true);
    ADD_FAILURE() << "no error";
  } catch (const RequestFailure& failure) {
    EXPECT_EQ(failure.error().status, 400);
    EXPECT_EQ(failure.error().type, "invalid_request_error");
    EXPECT_EQ(failure.error().message, "a system message must come first");
  }
}

TEST(GgufModelChatTemplate, AnUnsupportedTemplateFailsAtLoadWithItsPosition) {
  std::string path = write_template("bad.jinja", "line\n{{ x | no_such_filter }}");
  try {
    model_with_template(path);
    ADD_FAILURE() << "loaded";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find(path + ":2:8: no filter named 'no_such_filter'"),
              std::string::npos)
        << error.what();
  }
}

TEST(GgufModelChatTemplate, ChatTemplateKwargsReachTheTemplate) {
  auto model = model_with_template(write_template(
      "kwargs.jinja",
      "thinking={{ enable_thinking | default('unset') }} {{ messages[0].content }}"));
  auto request = chat({{"user", "q"}});
  request->chat_template_kwargs = R"({"enable_thinking": false})";
  std::string text = model->detokenize(model->encode_prompt(*request, true));
  EXPECT_NE(text.find("thinking=False q"), std::string::npos) << text;
}

std::string shared_template(const std::string& name) {
  return std::string(CHATFLOW_SOURCE_DIR) + "/../shared/models/templates/" + name;
}

// A weather tool offered, called, and answered: the conversation of a tool round trip.
std::unique_ptr<Request> tool_round_trip() {
  auto request = chat({{"user", "Weather in Oslo?"},
                       {"assistant", "", {{"call_abc", "get_weather", R"({"city":"Oslo"})"}}, {}},
                       {"tool", "sunny, 21 degrees", {}, "call_abc"}});
  request->generation.tools = {{"get_weather", "The weather in a city",
                                R"({"type":"object","properties":{"city":{"type":"string"}}})",
                                false}};
  request->generation.tool_choice = ToolChoice::automatic;
  return request;
}

TEST(GgufModelChatTemplate, ATemplateThatShowsToolsGetsThemAndTheirCallsAndResults) {
  std::string qwen = std::string(CHATFLOW_SOURCE_DIR) +
                     "/../shared/models/templates/Qwen-Qwen2.5-7B-Instruct.jinja";
  if (!std::filesystem::exists(qwen)) GTEST_SKIP() << "needs " << qwen;
  auto model = model_with_template(qwen);
  EXPECT_TRUE(model->chat_format().renders_tools());
  PromptFacts facts;
  std::string text = model->detokenize(model->encode_prompt(*tool_round_trip(), true, &facts));
  EXPECT_EQ(facts.tool_format, ToolCallFormat::hermes);
  // Qwen's own layout: the tools in <tools>, the call in <tool_call>, the result in
  // <tool_response> inside a user turn.
  EXPECT_NE(text.find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""),
            std::string::npos)
      << text;
  EXPECT_NE(
      text.find("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("<tool_response>\nsunny, 21 degrees\n</tool_response>"), std::string::npos)
      << text;
}

TEST(GgufModelChatTemplate, ATemplateWithoutToolsIsToldTheGenericFormat) {
  auto model = model_with_template(write_template(
      "no-tools.jinja", "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"));
  EXPECT_FALSE(model->chat_format().renders_tools());
  PromptFacts facts;
  std::string text = model->detokenize(model->encode_prompt(*tool_round_trip(), true, &facts));
  EXPECT_EQ(facts.tool_format, ToolCallFormat::generic);
  EXPECT_NE(text.find("[system] You can call functions."), std::string::npos) << text;
  EXPECT_NE(text.find("{\"name\":\"get_weather\",\"description\":\"The weather in a city\""),
            std::string::npos)
      << text;
  EXPECT_NE(
      text.find("[assistant] "
                "{\"tool_calls\":[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}]}"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("[user] Result of call call_abc:\nsunny, 21 degrees"), std::string::npos)
      << text;
  // tool_choice none: the tools are not shown and nothing is parsed as a call.
  auto quiet = tool_round_trip();
  quiet->generation.tool_choice = ToolChoice::none;
  std::string plain = model->detokenize(model->encode_prompt(*quiet, true, &facts));
  EXPECT_EQ(facts.tool_format, ToolCallFormat::none);
  EXPECT_EQ(plain.find("You can call functions"), std::string::npos) << plain;
}

TEST(GgufModelChatTemplate, ATemplateWithoutSystemTurnsGetsTheToolsInTheFirstUserTurn) {
  std::string gemma = shared_template("google-gemma-2-2b-it.jinja");
  if (!std::filesystem::exists(gemma)) GTEST_SKIP() << "needs " << gemma;
  auto model = model_with_template(gemma);
  auto request = tool_round_trip();
  // Two results of one turn's calls: one user turn, so Gemma's roles still alternate.
  request->messages[1].tool_calls.push_back({"call_def", "get_weather", R"({"city":"Bergen"})"});
  request->messages.push_back({"tool", "rain", {}, "call_def"});
  PromptFacts facts;
  std::string text = model->detokenize(model->encode_prompt(*request, true, &facts));
  EXPECT_EQ(facts.tool_format, ToolCallFormat::generic);
  EXPECT_NE(text.find("<start_of_turn>user\nYou can call functions."), std::string::npos) << text;
  EXPECT_NE(
      text.find("Result of call call_abc:\nsunny, 21 degrees\n\nResult of call call_def:\nrain"),
      std::string::npos)
      << text;
}

TEST(GgufModelChatTemplate, EachFamilysTemplateNamesItsCallFormat) {
  struct Expected {
    const char* file;
    ToolCallFormat format;
  };
  for (const Expected& expected :
       {Expected{"Qwen-Qwen2.5-7B-Instruct.jinja", ToolCallFormat::hermes},
        Expected{"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolCallFormat::hermes},
        Expected{"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolCallFormat::llama3},
        Expected{"meta-llama-Llama-3.2-3B-Instruct.jinja", ToolCallFormat::llama3},
        Expected{"mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolCallFormat::mistral},
        // Formats chatflow does not read: told the generic one.
        Expected{"CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", ToolCallFormat::generic},
        Expected{"meetkai-functionary-medium-v3.1.jinja", ToolCallFormat::generic},
        Expected{"google-gemma-2-2b-it.jinja", ToolCallFormat::generic}}) {
    std::string path = shared_template(expected.file);
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "needs " << path;
    auto model = model_with_template(path);
    PromptFacts facts;
    auto request = chat({{"user", "Weather in Oslo?"}});
    request->generation.tools = tool_round_trip()->generation.tools;
    model->encode_prompt(*request, true, &facts);
    EXPECT_EQ(facts.tool_format, expected.format) << expected.file;
  }
}

TEST(GgufModelChatTemplate, ANamedFormatStillWorks) {
  auto model = model_with_template("chatml");
  EXPECT_EQ(model->chat_format().name(), "chatml");
}

}  // namespace
}  // namespace chatflow
