#include "framework/cache/conversation.h"

#include <boost/json.hpp>

namespace chatflow::cache {
namespace json = boost::json;

std::string conversation_json(RequestKind kind, const std::vector<Message>& messages,
                              const std::string& prompt) {
  json::array turns;
  for (const auto& message : messages)
    turns.push_back(json::array{message.role, message.content});
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
      {"max_tokens", g.max_tokens}, {"stop", stop_array(g)}, {"ignore_eos", g.ignore_eos}});
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
  });
}

}  // namespace chatflow::cache
