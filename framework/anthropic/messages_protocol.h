// Anthropic's Messages API (POST /v1/messages) at the edge: a request body checked and turned into
// the same Request a chat completion becomes, and the answer (chat::AnswerStream's pieces)
// written down as Anthropic writes it: a message of content blocks, or the typed events of its
// stream. Errors are Anthropic's {"type": "error", "error": {"type", "message"}}. What the API has
// and chatflow does not (images, documents, citations, server tools) is refused by name.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "framework/api/request.h"
#include "framework/chat/answer_stream.h"

namespace chatflow::anthropic {

// Fills `request` from a JSON body; throws RequestFailure (400; 404 for an unknown model).
// `served_models`: the model ids this server answers to.
void parse_messages_request(std::string_view body, Request& request,
                            const std::vector<std::string>& served_models);

// POST /v1/messages/count_tokens: the conversation of a Messages request (model, system,
// messages, tools, tool_choice) without what only generation takes. Throws as above.
void parse_count_tokens_request(std::string_view body, Request& request,
                                const std::vector<std::string>& served_models);
// {"input_tokens": N}
std::string count_tokens_json(int64_t input_tokens);

// Anthropic's clients send their key as `x-api-key`: it is read as the Bearer credential every
// other route takes, when the request has no Authorization header of its own.
void adopt_api_key(HeaderFields& headers);

// Anthropic's error type for a status: 400 invalid_request_error, 401 authentication_error, 403
// permission_error, 404 not_found_error, 413 request_too_large, 429 rate_limit_error, 503
// overloaded_error, 504 timeout_error, other 4xx invalid_request_error, else api_error.
std::string_view error_type(int status);
// {"type": "error", "error": {"type", "message"}}
std::string error_json(const RequestError& error);
// The error event that ends a stream that already began.
std::string stream_error_event(const RequestError& error);

// The whole (non-streaming) message of a finished request.
std::string message_json(const Request& request, const chat::GatheredAnswer& answer);

// Renders one request's chunks as Anthropic streams them: message_start and a ping, then each
// part of the answer as a content block (thinking, text, tool_use) opened with
// content_block_start, written with its deltas (thinking_delta, text_delta, input_json_delta)
// and closed with content_block_stop; at the end message_delta (stop_reason, usage) and
// message_stop.
class MessagesSseEncoder {
 public:
  std::string encode(const Request& request, const Chunk& chunk);

 private:
  enum class Block { none, thinking, text };
  void open(Block block, std::string& out);
  void close(std::string& out);

  chat::AnswerStream answer_;
  bool started_ = false;
  Block open_ = Block::none;
  int next_index_ = 0;  // the index of the next content block
};

}  // namespace chatflow::anthropic
