// Chat templates: messages to the prompt text a chat model was trained on. A model's
// tokenizer.chat_template (Jinja) runs in chatflow's Jinja interpreter (framework/text/jinja/)
// with transformers' semantics; the common named formats are also built in, selectable by name.
// Models without a template get the plain format: the contents alone, one after another.
//
// The rendered prompt records which bytes came from the template: only there may text like
// "<|im_start|>" become a control token, so a user cannot forge turns by typing them.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "framework/engine/vocabulary.h"
#include "framework/text/jinja/chat_inputs.h"

namespace chatflow::engine {

enum class ChatTemplate { chatml, llama2, llama3, mistral, zephyr, phi3, plain };

std::string_view to_string(ChatTemplate kind);
std::optional<ChatTemplate> chat_template_from_name(std::string_view name);

struct ChatToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text
};

// Built as {role, content} most of the time; the tool fields default (see chatflow::Message).
struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string role, std::string content, std::vector<ChatToolCall> tool_calls = {},
              std::string tool_call_id = {})
      : role(std::move(role)),
        content(std::move(content)),
        tool_calls(std::move(tool_calls)),
        tool_call_id(std::move(tool_call_id)) {}
  std::string role;  // system, user, assistant, tool (Jinja templates that know tools only)
  std::string content;
  std::vector<ChatToolCall> tool_calls;  // assistant
  std::string tool_call_id;              // tool
};

struct RenderedPrompt {
  std::string text;
  std::vector<std::pair<size_t, size_t>>
      template_ranges;        // [begin, end) byte ranges written by the template
  bool includes_bos = false;  // the template wrote the BOS token itself
};

RenderedPrompt render_chat(ChatTemplate kind, const std::vector<ChatMessage>& messages,
                           const Vocabulary& vocabulary, bool add_generation_prompt = true);

// The text of the vocabulary's BOS and EOS tokens ("" when it has none): what a template sees
// as bos_token and eos_token.
std::string bos_text(const Vocabulary& vocabulary);
std::string eos_text(const Vocabulary& vocabulary);

// The rendered text as a prompt: includes_bos when it starts with the BOS token's text the
// template wrote.
RenderedPrompt to_rendered_prompt(jinja::TrackedString text, std::string_view bos);

// A chat format: a built-in named one, or a Jinja template compiled once and rendered per request.
class ChatFormat {
 public:
  static ChatFormat built_in(ChatTemplate kind);
  // Throws jinja::SyntaxError (line and column in `source`) for a template using what the
  // interpreter does not support.
  static ChatFormat jinja(std::string_view source);

  // "jinja" or the built-in's name.
  std::string_view name() const;
  bool is_jinja() const { return jinja_ != nullptr; }
  // The Jinja template's text (empty for a built-in format).
  const std::string& source() const { return source_; }

  // Whether the template shows the `tools` it is given (and so tool calls and results) itself.
  bool renders_tools() const;

  // Throws jinja::RenderError when the template raises (raise_exception's message, or the error
  // jinja2 would give); `template_kwargs` are the request's extra template variables; `tools`
  // (OpenAI's tools array, or null) reach a template that renders_tools().
  RenderedPrompt render(const std::vector<ChatMessage>& messages, const Vocabulary& vocabulary,
                        bool add_generation_prompt, const boost::json::object& template_kwargs = {},
                        const boost::json::value& tools = nullptr) const;

 private:
  ChatTemplate kind_ = ChatTemplate::plain;
  std::shared_ptr<const jinja::Template> jinja_;
  std::string source_;
};

}  // namespace chatflow::engine
