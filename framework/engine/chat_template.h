// Chat templates: messages to the prompt text a chat model was trained on. The common named
// formats are built in; a model's tokenizer.chat_template (Jinja) is matched to one of them by its
// markers, since running arbitrary Jinja is neither needed nor safe. Models without a template
// get the plain format: the contents alone, one after another.
//
// The rendered prompt records which bytes came from the template: only there may text like
// "<|im_start|>" become a control token, so a user cannot forge turns by typing them.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "framework/engine/vocabulary.h"

namespace chatflow::engine {

enum class ChatTemplate { chatml, llama2, llama3, mistral, zephyr, phi3, plain };

std::string_view to_string(ChatTemplate kind);
std::optional<ChatTemplate> chat_template_from_name(std::string_view name);
// The built-in format a Jinja template corresponds to (plain when none matches or it is empty).
ChatTemplate detect_chat_template(std::string_view jinja);

struct ChatMessage {
  std::string role;  // system, user, assistant
  std::string content;
};

struct RenderedPrompt {
  std::string text;
  std::vector<std::pair<size_t, size_t>>
      template_ranges;        // [begin, end) byte ranges written by the template
  bool includes_bos = false;  // the template wrote the BOS token itself
};

RenderedPrompt render_chat(ChatTemplate kind, const std::vector<ChatMessage>& messages,
                           const Vocabulary& vocabulary, bool add_generation_prompt = true);

}  // namespace chatflow::engine
