#include "framework/cache/conversation.h"

#include <algorithm>
#include <iterator>

#include <boost/json.hpp>

#include "framework/text/normalizer.h"

namespace chatflow::cache {
namespace json = boost::json;

namespace {

// What a user wrote, without what does not change what it asks: case, width, spacing and the
// punctuation of sentences and clauses (not the point of "3.5").
std::string loose_text(const std::string& content) {
  std::string normalized = text::normalize(content).text;
  std::string loose;
  for (size_t i = 0; i < normalized.size(); ++i) {
    char c = normalized[i];
    auto digit = [&](size_t at) {
      return at < normalized.size() && normalized[at] >= '0' && normalized[at] <= '9';
    };
    bool inside_number = i > 0 && digit(i - 1) && digit(i + 1);
    if (!inside_number && std::string_view(".,!?;:").find(c) != std::string_view::npos) continue;
    if (normalized.compare(i, 3, "\u3002") == 0 || normalized.compare(i, 3, "\u3001") == 0) {
      i += 2;  // 。and 、
      continue;
    }
    if (c == ' ' && (loose.empty() || loose.back() == ' ')) continue;
    loose += c;
  }
  while (!loose.empty() && loose.back() == ' ')
    loose.pop_back();
  return loose;
}

json::array turns_array(std::vector<Message>::const_iterator begin,
                        std::vector<Message>::const_iterator end, bool with_system,
                        bool loose_user_turns = false) {
  json::array turns;
  for (auto message = begin; message != end; ++message) {
    if (!with_system && message->role == "system") continue;
    json::array turn{message->role, loose_user_turns && message->role == "user"
                                        ? loose_text(message->content)
                                        : message->content};
    if (!message->tool_calls.empty() || !message->tool_call_id.empty()) {
      json::array calls;
      for (const auto& call : message->tool_calls)
        calls.push_back(json::array{call.id, call.name, call.arguments});
      turn.push_back(std::move(calls));
      turn.push_back(json::string(message->tool_call_id));
    }
    turns.push_back(std::move(turn));
  }
  return turns;
}
}  // namespace

std::string conversation_json(RequestKind kind, const std::vector<Message>& messages,
                              const std::string& prompt) {
  return json::serialize(json::array{kind == RequestKind::chat ? "chat" : "completion",
                                     turns_array(messages.begin(), messages.end(), true), prompt});
}

std::string system_prompt(const std::vector<Message>& messages) {
  std::string text;
  for (const auto& message : messages) {
    if (message.role == "system") text += message.content + "\n";
  }
  return text;
}

std::string newest_question(RequestKind kind, const std::vector<Message>& messages,
                            const std::string& prompt) {
  if (kind == RequestKind::completion) return prompt;
  for (auto message = messages.rbegin(); message != messages.rend(); ++message) {
    if (message->role == "user") return message->content;
  }
  return {};
}

std::string earlier_turns_json(RequestKind kind, const std::vector<Message>& messages) {
  if (kind == RequestKind::completion) return {};
  auto newest = std::find_if(messages.rbegin(), messages.rend(),
                             [](const Message& message) { return message.role == "user"; });
  if (newest == messages.rend()) return {};
  json::array earlier = turns_array(messages.begin(), std::prev(newest.base()), false, true);
  if (earlier.empty()) return {};
  return json::serialize(earlier);
}

std::string passages_json(const std::vector<ContextPassage>& passages) {
  json::array list;
  for (const auto& passage : passages)
    list.push_back(json::array{passage.text, passage.document, passage.title, passage.chunk});
  return json::serialize(list);
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
