// The OpenAI wire format: request bodies of /v1/chat/completions and /v1/completions checked and
// turned into a Request, and the non-streaming responses and error objects. Bad input is never
// "fixed": a wrong type or out-of-range value is a 400 naming the parameter.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "framework/api/capabilities.h"
#include "framework/api/request.h"
#include "framework/chat/answer_stream.h"

namespace chatflow::openai {

// Fills `request` from a JSON body; throws RequestFailure (400, or 404 for an unknown model).
// `served_models`: the model ids this server answers to.
void parse_completion_request(std::string_view body, RequestKind kind, Request& request,
                              const std::vector<std::string>& served_models);

// POST /tokenize: {"prompt" (or llama.cpp's "content"), "add_special_tokens" (or "add_special"),
// "model"}. Throws RequestFailure (400).
struct TokenizeRequest {
  std::string model;  // empty: the only model
  std::string text;
  bool add_special = true;
};
TokenizeRequest parse_tokenize_request(std::string_view body);

// POST /detokenize: {"tokens": [ids], "model"}. Throws RequestFailure (400).
struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};
DetokenizeRequest parse_detokenize_request(std::string_view body);

// DELETE /v1/cache: {"tenant", "model", "messages" | "prompt" | "all": true}. Throws
// RequestFailure (400).
CacheCorrection parse_cache_correction(std::string_view body);

// PATCH /v1/sessions/{id}: {"title": "..."}; returns the title without surrounding whitespace,
// which must leave 1 to kMaxSessionTitle characters. Throws RequestFailure (400; another key is
// unsupported_parameter).
inline constexpr size_t kMaxSessionTitle = 200;
std::string parse_session_title(std::string_view body);

// A session id, from the body's `session_id` or the `x-session-id` header: at most this many
// bytes. Throws RequestFailure (400 naming `param`) for a longer one.
inline constexpr size_t kMaxSessionIdBytes = 256;
inline void check_session_id(std::string_view id, const std::string& param) {
  if (id.size() > kMaxSessionIdBytes) {
    throw RequestFailure(RequestError{
        400, "invalid_request_error",
        "'" + param + "' may be at most " + std::to_string(kMaxSessionIdBytes) + " characters", "",
        param});
  }
}

// {"error": {"message", "type", "param", "code"}}
std::string error_json(const RequestError& error);

// A non-streamed answer, gathered from its chunks.
struct WholeAnswer {
  std::string text;
  std::string reasoning;
  std::vector<ToolCall> tool_calls;  // the chunks' structured calls (calls in `text` aside)
  std::vector<TokenLogprob> logprobs;

  void add(const Chunk& chunk);
};

// The whole (non-streaming) response of a finished request.
std::string completion_json(const Request& request, const WholeAnswer& answer);

// The SSE event that reports an error after a stream began, followed by [DONE].
std::string stream_error_events(const RequestError& error);

// Renders one request's chunks as OpenAI streams them: chat.completion.chunk (or text_completion)
// events, the assistant role first, the finish reason on an empty delta, with
// stream_options.include_usage a usage event (and "usage": null on every other), then [DONE].
// A chunk's reasoning is sent as reasoning_content and its structured tool calls as tool_calls,
// as they are; only its text is read for calls a local model wrote (request.tool_format).
class SseEncoder {
 public:
  std::string encode(const Request& request, const Chunk& chunk);

 private:
  bool role_sent_ = false;
  bool citations_sent_ = false;
  chat::AnswerStream answer_;
};

}  // namespace chatflow::openai
