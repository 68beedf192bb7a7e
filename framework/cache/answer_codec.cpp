#include "framework/cache/answer_codec.h"

#include <stdexcept>

#include <boost/json.hpp>

namespace chatflow::cache {
namespace json = boost::json;

namespace {

json::object chunk_json(const Chunk& chunk) {
  json::object object{{"text", chunk.text}};
  if (!chunk.reasoning.empty()) object["reasoning"] = chunk.reasoning;
  if (!chunk.tool_calls.empty()) {
    json::array calls;
    for (const auto& call : chunk.tool_calls)
      calls.push_back({{"id", call.id}, {"name", call.name}, {"arguments", call.arguments}});
    object["tool_calls"] = std::move(calls);
  }
  return object;
}

std::string string_member(const json::object& object, std::string_view key) {
  const json::value* value = object.if_contains(key);
  return value ? std::string(value->as_string()) : std::string();
}

Chunk chunk_of(const json::value& value) {
  const json::object& object = value.as_object();
  Chunk chunk;
  chunk.text = object.at("text").as_string();
  chunk.reasoning = string_member(object, "reasoning");
  if (const json::value* calls = object.if_contains("tool_calls")) {
    for (const auto& item : calls->as_array()) {
      const json::object& call = item.as_object();
      chunk.tool_calls.push_back({std::string(call.at("id").as_string()),
                                  std::string(call.at("name").as_string()),
                                  std::string(call.at("arguments").as_string())});
    }
  }
  return chunk;
}

}  // namespace

std::string encode_answer(const CachedAnswer& answer) {
  json::array chunks;
  for (const auto& chunk : answer.chunks)
    chunks.push_back(chunk_json(chunk));
  json::array citations;
  for (const auto& passage : answer.citations) {
    citations.push_back({{"text", passage.text},
                         {"document", passage.document},
                         {"title", passage.title},
                         {"chunk", passage.chunk},
                         {"score", passage.score}});
  }
  return json::serialize(json::object{
      {"format", kAnswerFormat},
      {"chunks", std::move(chunks)},
      {"finish", static_cast<int>(answer.finish)},
      {"usage",
       {{"prompt", answer.usage.prompt_tokens},
        {"completion", answer.usage.completion_tokens},
        {"cached_prompt", answer.usage.cached_prompt_tokens}}},
      {"tenant", answer.tenant},
      {"model", answer.model},
      {"conversation", answer.conversation},
      {"citations", std::move(citations)},
      {"tool_format", static_cast<int>(answer.tool_format)},
  });
}

std::shared_ptr<CachedAnswer> decode_answer(std::string_view text,
                                            std::chrono::steady_clock::time_point expires) {
  json::error_code error;
  json::value parsed = json::parse(text, error);
  if (error || !parsed.is_object())
    throw std::runtime_error("a cached answer is not a JSON object");
  try {
    const json::object& object = parsed.as_object();
    const json::value* layout = object.if_contains("format");
    if (!layout || !layout->is_int64() || layout->as_int64() != kAnswerFormat) {
      throw std::runtime_error("a cached answer of another layout (format " +
                               (layout ? json::serialize(*layout) : std::string("1")) +
                               ", expected " + std::to_string(kAnswerFormat) + ")");
    }
    auto answer = std::make_shared<CachedAnswer>();
    for (const auto& chunk : object.at("chunks").as_array())
      answer->chunks.push_back(chunk_of(chunk));
    int64_t finish = object.at("finish").as_int64();
    if (finish < 0 || finish > static_cast<int64_t>(FinishReason::content_filter))
      throw std::runtime_error("unknown finish reason");
    answer->finish = static_cast<FinishReason>(finish);
    const json::object& usage = object.at("usage").as_object();
    answer->usage.prompt_tokens = usage.at("prompt").as_int64();
    answer->usage.completion_tokens = usage.at("completion").as_int64();
    answer->usage.cached_prompt_tokens = usage.at("cached_prompt").as_int64();
    answer->tenant = object.at("tenant").as_string();
    answer->model = object.at("model").as_string();
    answer->conversation = object.at("conversation").as_string();
    for (const auto& item : object.at("citations").as_array()) {
      const json::object& passage = item.as_object();
      answer->citations.push_back({std::string(passage.at("text").as_string()),
                                   std::string(passage.at("document").as_string()),
                                   std::string(passage.at("title").as_string()),
                                   static_cast<uint32_t>(passage.at("chunk").to_number<int64_t>()),
                                   passage.at("score").to_number<double>()});
    }
    int64_t format = object.at("tool_format").as_int64();
    if (format < 0 || format > static_cast<int64_t>(ToolCallFormat::generic))
      throw std::runtime_error("unknown tool call format");
    answer->tool_format = static_cast<ToolCallFormat>(format);
    answer->expires = expires;
    return answer;
  } catch (const std::exception& failure) {
    throw std::runtime_error(std::string("a cached answer has the wrong shape: ") + failure.what());
  }
}

}  // namespace chatflow::cache
