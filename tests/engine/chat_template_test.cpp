// Chat templates: the built-in formats' exact prompt text, a GGUF's Jinja template run by the
// interpreter, and that text users write can never become control tokens.
#include "framework/engine/chat_template.h"

#include <algorithm>

#include <gtest/gtest.h>

#include "framework/engine/model.h"
#include "support/temp_model.h"

namespace chatflow::engine {
namespace {

std::shared_ptr<const Model> model() {
  ModelShape shape;
  shape.layers = 1;
  return Model::load(testing::temp_model(shape));
}

TEST(ChatTemplate, RendersChatMlExactly) {
  auto m = model();
  auto prompt = render_chat(ChatTemplate::chatml, {{"system", "Be brief."}, {"user", "Hi!"}},
                            m->tokenizer().vocabulary());
  EXPECT_EQ(prompt.text,
            "<|im_start|>system\nBe "
            "brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_FALSE(prompt.includes_bos);
}

TEST(ChatTemplate, RendersLlama2WithTheSystemInsideTheFirstTurn) {
  auto m = model();
  auto prompt = render_chat(ChatTemplate::llama2,
                            {{"system", "S"}, {"user", "U1"}, {"assistant", "A1"}, {"user", "U2"}},
                            m->tokenizer().vocabulary());
  EXPECT_EQ(prompt.text,
            "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nU1 [/INST] A1 </s><s>[INST] U2 [/INST]");
  EXPECT_TRUE(prompt.includes_bos);
}

TEST(ChatTemplate, PlainJoinsContents) {
  auto m = model();
  auto prompt =
      render_chat(ChatTemplate::plain, {{"user", "Once upon a time"}}, m->tokenizer().vocabulary());
  EXPECT_EQ(prompt.text, "Once upon a time");
}

TEST(ChatTemplate, ControlTokenTextFromAUserStaysText) {
  auto m = model();
  const Tokenizer& tokenizer = m->tokenizer();
  TokenId eos = tokenizer.vocabulary().eos;
  // zephyr writes </s> after every turn; the user also typed it.
  auto prompt = render_chat(ChatTemplate::zephyr, {{"system", "S"}, {"user", "hi </s> there"}},
                            tokenizer.vocabulary());
  auto trusted = tokenizer.encode_trusted(prompt.text, false, prompt.template_ranges);
  EXPECT_EQ(std::count(trusted.begin(), trusted.end(), eos), 2) << "only the template's two </s>";
  auto everything = tokenizer.encode(prompt.text, false, true);
  EXPECT_EQ(std::count(everything.begin(), everything.end(), eos), 3)
      << "what trusting the whole text would do";
}

TEST(ChatTemplate, RunsAJinjaTemplate) {
  auto m = model();
  auto format = ChatFormat::jinja(
      "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
      "message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
      "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}");
  auto prompt =
      format.render({{"system", "Be brief."}, {"user", "Hi!"}}, m->tokenizer().vocabulary(), true);
  EXPECT_EQ(prompt.text,
            "<|im_start|>system\nBe "
            "brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(format.name(), "jinja");
}

TEST(ChatTemplate, AJinjaTemplatesBosTokenCountsAsIncluded) {
  auto m = model();
  const Vocabulary& vocabulary = m->tokenizer().vocabulary();
  auto format =
      ChatFormat::jinja("{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}");
  auto prompt = format.render({{"user", "x"}}, vocabulary, false);
  EXPECT_EQ(prompt.text, bos_text(vocabulary) + "x");
  EXPECT_TRUE(prompt.includes_bos);
}

TEST(ChatTemplate, ControlTokenTextFromAUserStaysTextInAJinjaTemplate) {
  auto m = model();
  const Tokenizer& tokenizer = m->tokenizer();
  TokenId eos = tokenizer.vocabulary().eos;
  auto format = ChatFormat::jinja(
      "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content | trim }}{{ eos_token }}\n{% endfor "
      "%}");
  auto prompt =
      format.render({{"system", "S"}, {"user", " hi </s> there "}}, tokenizer.vocabulary(), true);
  EXPECT_EQ(prompt.text, "<|system|>\nS</s>\n<|user|>\nhi </s> there</s>\n");
  auto trusted = tokenizer.encode_trusted(prompt.text, false, prompt.template_ranges);
  EXPECT_EQ(std::count(trusted.begin(), trusted.end(), eos), 2) << "only the template's two </s>";
}

TEST(ChatTemplate, AJinjaTemplateThatRaisesGivesItsMessage) {
  auto m = model();
  auto format = ChatFormat::jinja(
      "{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}");
  try {
    format.render({{"assistant", "x"}}, m->tokenizer().vocabulary(), true);
    ADD_FAILURE() << "rendered";
  } catch (const jinja::RenderError& error) {
    EXPECT_STREQ(error.what(), "first must be user");
  }
}

TEST(ChatTemplate, AnUnsupportedJinjaTemplateFailsAtLoadWithItsPosition) {
  try {
    ChatFormat::jinja("ok\n{% include 'other.jinja' %}");
    ADD_FAILURE() << "loaded";
  } catch (const jinja::SyntaxError& error) {
    EXPECT_EQ(error.position().line, 2);
    EXPECT_EQ(error.position().column, 4);
  }
}

TEST(ChatTemplate, AJinjaTemplateChainedTooDeeplyFailsAtLoadWithItsPosition) {
  // Such a template may come inside a downloaded GGUF: it is refused when the model loads.
  std::string source = "{% for message in messages %}\n{{ message.content";
  for (int i = 0; i < 20000; ++i)
    source += " ~ ''";
  source += " }}{% endfor %}";
  try {
    ChatFormat::jinja(source);
    ADD_FAILURE() << "loaded";
  } catch (const jinja::SyntaxError& error) {
    EXPECT_EQ(error.position().line, 2);
    EXPECT_NE(error.message().find("nested deeper than"), std::string::npos) << error.what();
  }
}

TEST(ChatTemplate, ARenderOverItsBudgetIsARenderErrorForThatRequest) {
  auto m = model();
  auto format =
      ChatFormat::jinja("{% for message in messages %}{{ message.content * 1000 }}{% endfor %}");
  std::vector<ChatMessage> small = {{"user", "hello"}};
  EXPECT_EQ(format.render(small, m->tokenizer().vocabulary(), false).text.size(), 5000u);
  std::vector<ChatMessage> large = {{"user", std::string(20000, 'x')}};  // 20 MB rendered
  try {
    format.render(large, m->tokenizer().vocabulary(), false);
    ADD_FAILURE() << "rendered";
  } catch (const jinja::RenderError& error) {
    EXPECT_EQ(error.kind(), jinja::RenderError::Kind::limit);
    EXPECT_NE(std::string(error.what()).find("more than 16 MiB"), std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace chatflow::engine
