// OpenAI's Responses API (POST /v1/responses) at the edge: a request body checked and turned into
// the same Request a chat completion becomes, and the answer (chat::AnswerStream's pieces) written
// down as a response object of output items (reasoning, message, function_call) or as the typed
// events of its stream. Errors are OpenAI's {"error": {"message", "type", "param", "code"}}. What
// the API has and chatflow does not (built-in tools, images and files, background runs, ...) is
// refused by name.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include "framework/api/request.h"
#include "framework/chat/answer_stream.h"
#include "framework/responses/response_store.h"

namespace chatflow::responses {

// What a Responses request asks beyond the protocol-neutral Request.
struct ResponsesRequest {
  // The request's settings as the response object repeats them (instructions, max_output_tokens,
  // previous_response_id, store, temperature, text, tool_choice, tools, top_p, user, metadata...).
  boost::json::object echo;
  bool store = true;
  // The conversation so far (the previous response's, then this input), without the
  // instructions: what a response that continues from this one starts from.
  std::vector<Message> conversation;
};

// Fills `request` (a chat request) from a JSON body; throws RequestFailure (400; 404 for an
// unknown model). `served_models`: the model ids this server answers to. `owner`: who the caller
// is to `store` (owner_of); previous_response_id is looked up there (400
// previous_response_not_found when it kept none).
ResponsesRequest parse_request(std::string_view body, Request& request,
                               const std::vector<std::string>& served_models,
                               const ResponseKeeper& store,
                               const std::optional<std::string>& owner);

// Writes one request's answer as a response: its stream's events (response.created,
// response.in_progress, then per output item response.output_item.added, its parts and deltas,
// response.output_item.done, and at the end response.completed or response.incomplete, each with
// its sequence_number), and the whole response object. A streamed and a whole answer go through
// the same items, so they agree. When the request asked to store it, the finished response and
// its conversation go into the store under `owner`.
class ResponseWriter {
 public:
  ResponseWriter(ResponsesRequest settings, std::shared_ptr<ResponseKeeper> store,
                 std::optional<std::string> owner);

  // The events `chunk` adds (empty when it adds none). The final chunk finishes the response: a
  // stream's is then kept in the store at once, before the client reads its last event.
  std::string push(const Request& request, const Chunk& chunk);
  // The whole response object of a request that ended normally (kept in the store when asked).
  std::string finish(const Request& request);
  // The `error` event that ends a stream that already began.
  std::string stream_error(const RequestError& error);

 private:
  enum class Item { none, reasoning, message };
  std::string event(std::string_view type, boost::json::object data);
  void open(const Request& request, Item item, std::string& out);
  void close(std::string& out, std::string_view status);
  void add_call(const Request& request, const chat::ToolCallDelta& call, std::string& out);
  std::string item_id(const Request& request, std::string_view prefix) const;
  boost::json::object response_object(const Request& request, std::string_view status) const;
  void keep(const Request& request);

  ResponsesRequest settings_;
  std::shared_ptr<ResponseKeeper> store_;
  std::optional<std::string> owner_;
  chat::AnswerStream answer_;
  bool started_ = false;
  bool finished_ = false;
  bool kept_ = false;
  int64_t sequence_ = 0;
  Item open_ = Item::none;
  std::string open_id_;
  std::string open_text_;
  boost::json::array output_;  // the finished items
  std::string answer_text_;    // every message item's text, for the kept conversation
  std::vector<ToolCall> calls_;
  std::optional<chat::StopReason> stop_;
  Usage usage_;
};

}  // namespace chatflow::responses
