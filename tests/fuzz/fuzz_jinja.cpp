// libFuzzer target: any bytes as a chat template. Parsing must either succeed or throw
// jinja::SyntaxError; a parsed template rendered over a small conversation must either succeed
// or throw jinja::RenderError. Templates with macros or range() are only parsed, since their
// rendering can legitimately take exponential time.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <boost/json.hpp>

#include "framework/text/jinja/chat_inputs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view source(reinterpret_cast<const char*>(data), size);
  using namespace chatflow::jinja;
  try {
    Template chat_template = Template::parse(source);
    if (size > 2048 || source.find("macro") != std::string_view::npos ||
        source.find("range") != std::string_view::npos ||
        source.find("call") != std::string_view::npos)
      return 0;
    ChatTemplateInputs inputs;
    inputs.messages = boost::json::parse(
                          R"([{"role": "user", "content": "hi {{ x }}"},
                              {"role": "assistant", "content": "", "tool_calls": [{"function":
                               {"name": "f", "arguments": "{\"a\": [1, 2.5, null]}"}}]}])")
                          .as_array();
    inputs.bos_token = "<s>";
    inputs.add_generation_prompt = true;
    render_chat_template(chat_template, inputs);
  } catch (const SyntaxError&) {
  } catch (const RenderError&) {
  }
  return 0;
}
