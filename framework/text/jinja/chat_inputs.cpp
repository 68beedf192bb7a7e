#include "framework/text/jinja/chat_inputs.h"

#include <boost/json.hpp>

#include "framework/text/jinja/json.h"

namespace chatflow::jinja {
namespace {

// The messages with each tool call's JSON-string arguments parsed; false when none was.
bool parse_tool_arguments(boost::json::array& messages) {
  bool changed = false;
  for (auto& message : messages) {
    auto* fields = message.if_object();
    if (!fields) continue;
    auto* calls = fields->if_contains("tool_calls");
    if (!calls || !calls->is_array()) continue;
    for (auto& call : calls->get_array()) {
      auto* function = call.is_object() ? call.get_object().if_contains("function") : nullptr;
      if (!function || !function->is_object()) continue;
      auto* arguments = function->get_object().if_contains("arguments");
      if (!arguments || !arguments->is_string()) continue;
      boost::system::error_code error;
      boost::json::value parsed = boost::json::parse(arguments->get_string(), error);
      if (error || !parsed.is_object()) continue;
      *arguments = std::move(parsed);
      changed = true;
    }
  }
  return changed;
}

Dict variables_for(const ChatTemplateInputs& inputs, const boost::json::array& messages) {
  Dict variables;
  variables.entries.reserve(6 + inputs.extra_variables.size());
  auto set = [&](std::string_view name, Value value) {
    variables.set(Value::data_string(std::string(name)), std::move(value));
  };
  set("bos_token", Value::template_string(inputs.bos_token));
  set("eos_token", Value::template_string(inputs.eos_token));
  for (const auto& [key, value] : inputs.extra_variables)
    set(key, from_json(value));
  set("messages", from_json(messages));
  set("tools", from_json(inputs.tools));
  set("documents", from_json(inputs.documents));
  set("add_generation_prompt", Value(inputs.add_generation_prompt));
  return variables;
}

}  // namespace

TrackedString render_chat_template(const Template& chat_template, const ChatTemplateInputs& inputs,
                                   const Environment& environment) {
  boost::json::array with_objects = inputs.messages;
  if (!parse_tool_arguments(with_objects))
    return chat_template.render(variables_for(inputs, with_objects), environment);
  try {
    return chat_template.render(variables_for(inputs, with_objects), environment);
  } catch (const RenderError&) {
    return chat_template.render(variables_for(inputs, inputs.messages), environment);
  }
}

}  // namespace chatflow::jinja
