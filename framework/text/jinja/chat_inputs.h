// What transformers' apply_chat_template hands a template: messages, tools, documents,
// add_generation_prompt, the special tokens and extra keyword arguments; and its tool-call
// convention: OpenAI's `arguments` JSON strings become objects, and stay strings for templates
// that fail on objects because they treat them as text (as vLLM does).
#pragma once

#include <string>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "framework/text/jinja/template.h"

namespace chatflow::jinja {

struct ChatTemplateInputs {
  boost::json::array messages;
  boost::json::value tools;      // null: the template sees none
  boost::json::value documents;  // null: the template sees none
  bool add_generation_prompt = false;
  // Written by the template when it prints them: the only variables whose bytes may become
  // control tokens.
  std::string bos_token;
  std::string eos_token;
  // chat_template_kwargs and the like: request data (they override the special tokens, as in
  // transformers, but as data).
  boost::json::object extra_variables;
};

// Throws RenderError: the one from the last attempt when every attempt fails.
TrackedString render_chat_template(const Template& chat_template, const ChatTemplateInputs& inputs,
                                   const Environment& environment = {});

}  // namespace chatflow::jinja
