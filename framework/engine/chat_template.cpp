#include "framework/engine/chat_template.h"

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

ChatTemplate detect_chat_template(std::string_view jinja) {
  auto has = [&](std::string_view marker) { return jinja.find(marker) != std::string_view::npos; };
  if (has("<|im_start|>")) return ChatTemplate::chatml;
  if (has("<|start_header_id|>")) return ChatTemplate::llama3;
  if (has("<|assistant|>") && has("<|end|>")) return ChatTemplate::phi3;
  if (has("<|assistant|>")) return ChatTemplate::zephyr;
  if (has("[INST]") && has("<<SYS>>")) return ChatTemplate::llama2;
  if (has("[INST]")) return ChatTemplate::mistral;
  return ChatTemplate::plain;
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
  return id != kNoToken ? vocabulary.tokens[static_cast<size_t>(id)].text : std::string(fallback);
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

}  // namespace chatflow::engine
