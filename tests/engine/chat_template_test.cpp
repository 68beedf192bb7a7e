// Chat templates: detection from a GGUF's Jinja text, the exact prompt text, and that text users
// write can never become control tokens.
#include "framework/engine/chat_template.h"

#include <algorithm>

#include <gtest/gtest.h>

#include "framework/engine/model.h"
#include "support/temp_model.h"

namespace chatflow::engine {
namespace {

TEST(ChatTemplate, DetectsTheFamilyFromTheJinjaMarkers) {
  EXPECT_EQ(detect_chat_template("{% for m in messages %}<|im_start|>{{m.role}}"),
            ChatTemplate::chatml);
  EXPECT_EQ(detect_chat_template("<|start_header_id|>{{ role }}<|end_header_id|>"),
            ChatTemplate::llama3);
  EXPECT_EQ(detect_chat_template("<|user|>\n{{c}}<|end|>\n<|assistant|>"), ChatTemplate::phi3);
  EXPECT_EQ(detect_chat_template("<|user|>\n{{c}}</s>\n<|assistant|>"), ChatTemplate::zephyr);
  EXPECT_EQ(detect_chat_template("[INST] <<SYS>>\n{{s}}\n<</SYS>>"), ChatTemplate::llama2);
  EXPECT_EQ(detect_chat_template("{{ bos_token }}[INST] {{ c }} [/INST]"), ChatTemplate::mistral);
  EXPECT_EQ(detect_chat_template(""), ChatTemplate::plain);
  EXPECT_EQ(detect_chat_template("{{ something unknown }}"), ChatTemplate::plain);
}

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

}  // namespace
}  // namespace chatflow::engine
