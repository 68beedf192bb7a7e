#include "framework/engine/chat_template.h"

#include <boost/json.hpp>

namespace chatflow::engine {

std::string_view to_string(ChatTemplate kind) {
  switch (kind) {
    case ChatTemplate::chatml:
      return "chatml";
    case ChatTemplate::llama2:
      return "llama-2";
    case ChatTemplate::llama3:
      return "llama-3";
    case ChatTemplate::mistral:
      return "mistral";
    case ChatTemplate::zephyr:
      return "zephyr";
    case ChatTemplate::phi3:
      return "phi-3";
    case ChatTemplate::plain:
      return "plain";
  }
  return "plain";
}

std::optional<ChatTemplate> chat_template_from_name(std::string_view name) {
  for (ChatTemplate kind :
       {ChatTemplate::chatml, ChatTemplate::llama2, ChatTemplate::llama3, ChatTemplate::mistral,
        ChatTemplate::zephyr, ChatTemplate::phi3, ChatTemplate::plain}) {
    if (to_string(kind) == name) return kind;
  }
  return std::nullopt;
}

namespace {

// Appends text, remembering whether the template or a message wrote it.
class PromptBuilder {
 public:
  void markup(std::string_view text) {
    if (text.empty()) return;
    size_t begin = prompt_.text.size();
    prompt_.text += text;
    if (!prompt_.template_ranges.empty() && prompt_.template_ranges.back().second == begin) {
      prompt_.template_ranges.back().second = prompt_.text.size();
    } else {
      prompt_.template_ranges.emplace_back(begin, prompt_.text.size());
    }
  }
  void content(std::string_view text) { prompt_.text += text; }
  RenderedPrompt take() { return std::move(prompt_); }
  void set_includes_bos() { prompt_.includes_bos = true; }

 private:
  RenderedPrompt prompt_;
};

std::string token_text(const Vocabulary& vocabulary, TokenId id, std::string_view fallback) {
  return id != kNoToken && static_cast<size_t>(id) < vocabulary.tokens.size()
             ? vocabulary.tokens[static_cast<size_t>(id)].text
             : std::string(fallback);
}

// The system message, if the conversation starts with one.
std::string system_text(const std::vector<ChatMessage>& messages) {
  return !messages.empty() && messages.front().role == "system" ? messages.front().content
                                                                : std::string();
}

}  // namespace

RenderedPrompt render_chat(ChatTemplate kind, const std::vector<ChatMessage>& messages,
                           const Vocabulary& vocabulary, bool add_generation_prompt) {
  PromptBuilder out;
  const std::string bos = token_text(vocabulary, vocabulary.bos, "<s>");
  const std::string eos = token_text(vocabulary, vocabulary.eos, "</s>");
  switch (kind) {
    case ChatTemplate::chatml:
      for (const auto& message : messages) {
        out.markup("<|im_start|>" + message.role + "\n");
        out.content(message.content);
        out.markup("<|im_end|>\n");
      }
      if (add_generation_prompt) out.markup("<|im_start|>assistant\n");
      break;
    case ChatTemplate::llama3:
      out.markup("<|begin_of_text|>");
      out.set_includes_bos();
      for (const auto& message : messages) {
        out.markup("<|start_header_id|>" + message.role + "<|end_header_id|>\n\n");
        out.content(message.content);
        out.markup("<|eot_id|>");
      }
      if (add_generation_prompt) out.markup("<|start_header_id|>assistant<|end_header_id|>\n\n");
      break;
    case ChatTemplate::llama2:
    case ChatTemplate::mistral: {
      // [INST] turns; the system message goes inside the first user turn.
      std::string system = system_text(messages);
      bool first_user = true;
      out.set_includes_bos();
      for (const auto& message : messages) {
        if (message.role == "system") continue;
        if (message.role == "user") {
          out.markup(bos + "[INST] ");
          if (first_user && !system.empty()) {
            if (kind == ChatTemplate::llama2) {
              out.markup("<<SYS>>\n");
              out.content(system);
              out.markup("\n<</SYS>>\n\n");
            } else {
              out.content(system);
              out.markup("\n\n");
            }
          }
          first_user = false;
          out.content(message.content);
          out.markup(" [/INST]");
        } else {
          out.markup(kind == ChatTemplate::llama2 ? " " : "");
          out.content(message.content);
          out.markup((kind == ChatTemplate::llama2 ? " " : "") + eos);
        }
      }
      break;
    }
    case ChatTemplate::zephyr:
      for (const auto& message : messages) {
        out.markup("<|" + message.role + "|>\n");
        out.content(message.content);
        out.markup(eos + "\n");
      }
      if (add_generation_prompt) out.markup("<|assistant|>\n");
      break;
    case ChatTemplate::phi3:
      for (const auto& message : messages) {
        out.markup("<|" + message.role + "|>\n");
        out.content(message.content);
        out.markup("<|end|>\n");
      }
      if (add_generation_prompt) out.markup("<|assistant|>\n");
      break;
    case ChatTemplate::plain:
      for (size_t i = 0; i < messages.size(); ++i) {
        if (i > 0) out.markup("\n\n");
        out.content(messages[i].content);
      }
      break;
  }
  return out.take();
}

std::string bos_text(const Vocabulary& vocabulary) {
  return token_text(vocabulary, vocabulary.bos, "");
}

std::string eos_text(const Vocabulary& vocabulary) {
  return token_text(vocabulary, vocabulary.eos, "");
}

RenderedPrompt to_rendered_prompt(jinja::TrackedString text, std::string_view bos) {
  RenderedPrompt prompt;
  prompt.template_ranges = text.template_ranges();
  prompt.includes_bos = !bos.empty() && !prompt.template_ranges.empty() &&
                        prompt.template_ranges.front().first == 0 &&
                        prompt.template_ranges.front().second >= bos.size() &&
                        std::string_view(text.text()).substr(0, bos.size()) == bos;
  prompt.text = text.take_text();
  return prompt;
}

ChatFormat ChatFormat::built_in(ChatTemplate kind) {
  ChatFormat format;
  format.kind_ = kind;
  return format;
}

ChatFormat ChatFormat::jinja(std::string_view source) {
  ChatFormat format;
  format.jinja_ = std::make_shared<const jinja::Template>(jinja::Template::parse(source));
  format.source_ = std::string(source);
  return format;
}

std::string_view ChatFormat::name() const {
  return jinja_ ? "jinja" : to_string(kind_);
}

bool ChatFormat::renders_tools() const {
  return jinja_ && source_.find("tools") != std::string::npos;
}

RenderedPrompt ChatFormat::render(const std::vector<ChatMessage>& messages,
                                  const Vocabulary& vocabulary, bool add_generation_prompt,
                                  const boost::json::object& template_kwargs,
                                  const boost::json::value& tools) const {
  if (!jinja_) return render_chat(kind_, messages, vocabulary, add_generation_prompt);
  jinja::ChatTemplateInputs inputs;
  inputs.messages.reserve(messages.size());
  for (const auto& message : messages) {
    boost::json::object entry{{"role", message.role}, {"content", message.content}};
    if (!message.tool_calls.empty()) {
      // As OpenAI sends them; chat_inputs turns the arguments into objects for the template.
      boost::json::array calls;
      for (const auto& call : message.tool_calls) {
        calls.push_back(boost::json::object{
            {"id", call.id},
            {"type", "function"},
            {"function", boost::json::object{{"name", call.name}, {"arguments", call.arguments}}}});
      }
      entry["tool_calls"] = std::move(calls);
      if (message.content.empty()) entry["content"] = nullptr;
    }
    if (!message.tool_call_id.empty()) entry["tool_call_id"] = message.tool_call_id;
    inputs.messages.push_back(std::move(entry));
  }
  inputs.tools = tools;
  inputs.add_generation_prompt = add_generation_prompt;
  inputs.bos_token = bos_text(vocabulary);
  inputs.eos_token = eos_text(vocabulary);
  inputs.extra_variables = template_kwargs;
  return to_rendered_prompt(jinja::render_chat_template(*jinja_, inputs), inputs.bos_token);
}

}  // namespace chatflow::engine
