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

std::string write_template(const std::string& name, const std::string& text) {
  auto path = std::filesystem::temp_directory_path() /
              ("chatflow-" + std::to_string(::getpid()) + "-" + name);
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

TEST(GgufModelChatTemplate, ANamedFormatStillWorks) {
  auto model = model_with_template("chatml");
  EXPECT_EQ(model->chat_format().name(), "chatml");
}

}  // namespace
}  // namespace chatflow
