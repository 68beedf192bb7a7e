#include "framework/cache/conversation.h"

#include <boost/json.hpp>

namespace chatflow::cache {
namespace json = boost::json;

std::string conversation_json(RequestKind kind, const std::vector<Message>& messages,
                              const std::string& prompt) {
  json::array turns;
  for (const auto& message : messages) {
    json::array turn{message.role, message.content};
    if (!message.tool_calls.empty() || !message.tool_call_id.empty()) {
      json::array calls;
      for (const auto& call : message.tool_calls)
        calls.push_back(json::array{call.id, call.name, call.arguments});
      turn.push_back(std::move(calls));
      turn.push_back(json::string(message.tool_call_id));
    }
    turns.push_back(std::move(turn));
  }
  return json::serialize(
      json::array{kind == RequestKind::chat ? "chat" : "completion", std::move(turns), prompt});
}

std::string system_prompt(const std::vector<Message>& messages) {
  std::string text;
  for (const auto& message : messages) {
    if (message.role == "system") text += message.content + "\n";
  }
  return text;
}

std::string conversation_text(RequestKind kind, const std::vector<Message>& messages,
                              const std::string& prompt) {
  if (kind == RequestKind::completion) return prompt;
  std::string text;
  for (const auto& message : messages) {
    if (message.role == "system") continue;
    if (!text.empty()) text += "\n";
    text += message.content;
  }
  return text;
}

namespace {
json::array stop_array(const GenerationParams& g) {
  json::array stop;
  for (const auto& text : g.stop)
    stop.push_back(json::string(text));
  return stop;
}
}  // namespace

std::string answer_shape_json(const GenerationParams& g) {
  return json::serialize(json::object{
      {"max_tokens", g.max_tokens},
      {"stop", stop_array(g)},
      {"ignore_eos", g.ignore_eos},
      {"response_format",
       json::array{static_cast<int>(g.response_format.kind), g.response_format.schema}}});
}

// The offered tools as they shape the prompt and the grammar.
json::array tools_array(const GenerationParams& g) {
  json::array tools;
  for (const auto& tool : g.tools)
    tools.push_back(json::array{tool.name, tool.description, tool.parameters, tool.strict});
  return tools;
}

std::string output_parameters_json(const GenerationParams& g) {
  return json::serialize(json::object{
      {"max_tokens", g.max_tokens},
      {"temperature", g.temperature},
      {"top_p", g.top_p},
      {"top_k", g.top_k},
      {"min_p", g.min_p},
      {"presence_penalty", g.presence_penalty},
      {"frequency_penalty", g.frequency_penalty},
      {"repetition_penalty", g.repetition_penalty},
      {"seed", g.seed ? json::value(*g.seed) : json::value()},
      {"stop", stop_array(g)},
      {"ignore_eos", g.ignore_eos},
      {"tools", tools_array(g)},
      {"tool_choice", static_cast<int>(g.tool_choice)},
      {"tool_choice_function", g.tool_choice_function},
      {"parallel_tool_calls", g.parallel_tool_calls},
      {"response_format",
       json::array{static_cast<int>(g.response_format.kind), g.response_format.schema}},
  });
}

}  // namespace chatflow::cache
