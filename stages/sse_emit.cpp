// sse_emit: renders each chunk as the OpenAI API streams it (server-sent events of
// chat.completion.chunk or text_completion objects), into Chunk::encoded for an HTTP sink to
// write as is. The first chat chunk carries the assistant role; the last one the finish reason;
// with stream_options.include_usage a usage chunk (and "usage": null on every other) precedes
// "data: [DONE]".
#include <boost/json.hpp>

#include "framework/engine/detokenizer.h"
#include "framework/registry.h"

namespace chatflow {
namespace {

namespace json = boost::json;

struct SseState : StreamState {
  bool role_sent = false;
};

std::string event(const json::value& value) {
  return "data: " + json::serialize(value) + "\n\n";
}

json::array bytes_of(const std::string& text) {
  json::array bytes;
  for (unsigned char c : text)
    bytes.push_back(c);
  return bytes;
}

json::value chat_logprobs(const std::vector<TokenLogprob>& logprobs) {
  if (logprobs.empty()) return nullptr;
  json::array content;
  for (const auto& token : logprobs) {
    json::array top;
    for (const auto& alternative : token.top) {
      top.push_back({{"token", engine::valid_utf8(alternative.text)},
                     {"logprob", alternative.logprob},
                     {"bytes", bytes_of(alternative.text)}});
    }
    content.push_back({{"token", engine::valid_utf8(token.text)},
                       {"logprob", token.logprob},
                       {"bytes", bytes_of(token.text)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json::value completion_logprobs(const std::vector<TokenLogprob>& logprobs) {
  if (logprobs.empty()) return nullptr;
  json::array tokens, token_logprobs, top_logprobs;
  for (const auto& token : logprobs) {
    tokens.push_back(json::string(engine::valid_utf8(token.text)));
    token_logprobs.push_back(token.logprob);
    json::object top;
    for (const auto& alternative : token.top)
      top[engine::valid_utf8(alternative.text)] = alternative.logprob;
    top_logprobs.push_back(top);
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top_logprobs}};
}

json::object usage_of(const Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", usage.cached_prompt_tokens}}}};
}

class SseEmitStage final : public StreamStage {
 public:
  void process(StreamContext& context, Chunk chunk) override {
    Request& request = context.request();
    auto& state = context.state<SseState>();
    bool chat = request.kind == RequestKind::chat;
    auto envelope = [&](json::array choices) {
      json::object object{{"id", request.id},
                          {"object", chat ? "chat.completion.chunk" : "text_completion"},
                          {"created", request.created},
                          {"model", request.model},
                          {"choices", std::move(choices)}};
      if (request.include_usage) object["usage"] = nullptr;
      return object;
    };
    auto choice = [&](const std::string& text, const std::vector<TokenLogprob>& logprobs,
                      bool with_role, std::optional<FinishReason> finish) {
      json::value finish_value =
          finish ? json::value(std::string(to_string(*finish))) : json::value(nullptr);
      if (!chat) {
        return json::object{{"text", text},
                            {"index", 0},
                            {"logprobs", completion_logprobs(logprobs)},
                            {"finish_reason", finish_value}};
      }
      json::object delta;
      if (with_role) delta["role"] = "assistant";
      if (with_role || !text.empty()) delta["content"] = text;
      return json::object{{"index", 0},
                          {"delta", delta},
                          {"logprobs", chat_logprobs(logprobs)},
                          {"finish_reason", finish_value}};
    };
    std::string text = engine::valid_utf8(chunk.text);
    std::string encoded;
    if (chat && !state.role_sent) {
      encoded += event(envelope({choice("", {}, true, std::nullopt)}));
      state.role_sent = true;
    }
    if (!text.empty() || !chunk.logprobs.empty()) {
      encoded += event(envelope({choice(text, chunk.logprobs, false, std::nullopt)}));
    }
    if (chunk.is_final()) {
      encoded += event(envelope({choice("", {}, false, chunk.finish)}));
      if (request.include_usage) {
        json::object usage_chunk = envelope({});
        usage_chunk["usage"] = usage_of(chunk.usage ? *chunk.usage : request.usage);
        encoded += event(usage_chunk);
      }
      encoded += "data: [DONE]\n\n";
    }
    chunk.encoded = std::move(encoded);
    context.emit(std::move(chunk));
  }
};

StageTypeInfo sse_emit_stage_type() {
  StageTypeBuilder<NoConfig> type(
      "sse_emit", StageKind::stream,
      "Renders chunks as OpenAI-compatible server-sent events for the HTTP sink.");
  type.port("out", PortKind::stream, "chunks with their SSE bytes");
  type.create([](const NoConfig&, StageContext&) { return std::make_unique<SseEmitStage>(); });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(sse_emit_stage_type);

}  // namespace
}  // namespace chatflow
