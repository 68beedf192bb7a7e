// The answer half of the Responses API: the pieces of an answer (chat::AnswerStream) as output
// items and the typed events that build them, and the response object they end in.
#include <algorithm>

#include <boost/json.hpp>

#include "framework/responses/responses_protocol.h"

namespace chatflow::responses {
namespace json = boost::json;
namespace {

json::object usage_json(const Usage& usage) {
  return {{"input_tokens", usage.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", usage.cached_prompt_tokens}}},
          {"output_tokens", usage.completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", usage.total()}};
}

json::object output_text_part(const std::string& text) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", json::array{}}};
}

json::object reasoning_text_part(const std::string& text) {
  return {{"type", "reasoning_text"}, {"text", text}};
}

// Why an answer that ended is incomplete, or nullptr when it is complete.
const char* incomplete_reason(chat::StopReason stop) {
  switch (stop) {
    case chat::StopReason::length:
      return "max_output_tokens";
    case chat::StopReason::content_filter:
      return "content_filter";
    case chat::StopReason::stop:
    case chat::StopReason::tool_calls:
      return nullptr;
  }
  return nullptr;
}

}  // namespace

ResponseWriter::ResponseWriter(ResponsesRequest settings, std::shared_ptr<ResponseKeeper> store,
                               std::optional<std::string> owner)
    : settings_(std::move(settings)), store_(std::move(store)), owner_(std::move(owner)) {}

std::string ResponseWriter::event(std::string_view type, json::object data) {
  json::object typed{{"type", type}};
  for (auto& entry : data)
    typed.emplace(entry.key(), std::move(entry.value()));
  typed["sequence_number"] = sequence_++;
  return "event: " + std::string(type) + "\ndata: " + json::serialize(typed) + "\n\n";
}

// Item ids follow from the response's and the item's place, so a streamed item and the same item
// in the final response (or GET) have one id.
std::string ResponseWriter::item_id(const Request& request, std::string_view prefix) const {
  std::string_view suffix = request.id;
  if (suffix.starts_with("resp_")) suffix.remove_prefix(5);
  return std::string(prefix) + std::string(suffix) + "_" + std::to_string(output_.size());
}

json::object ResponseWriter::response_object(const Request& request,
                                             std::string_view status) const {
  const char* incomplete = stop_ ? incomplete_reason(*stop_) : nullptr;
  json::object response{
      {"id", request.id},
      {"object", "response"},
      {"created_at", request.created},
      {"status", status},
      {"background", false},
      {"error", nullptr},
      {"incomplete_details", incomplete && status == "incomplete"
                                 ? json::value(json::object{{"reason", incomplete}})
                                 : json::value(nullptr)},
      {"model", request.model},
      {"output", status == "in_progress" ? json::array{} : output_}};
  for (const auto& entry : settings_.echo)
    response[entry.key()] = entry.value();
  response["usage"] = status == "in_progress" ? json::value(nullptr) : usage_json(usage_);
  return response;
}

void ResponseWriter::open(const Request& request, Item item, std::string& out) {
  if (open_ == item) return;
  close(out, "completed");
  int64_t index = static_cast<int64_t>(output_.size());
  open_id_ = item_id(request, item == Item::message ? "msg_" : "rs_");
  open_text_.clear();
  json::object added = item == Item::message ? json::object{{"id", open_id_},
                                                            {"type", "message"},
                                                            {"status", "in_progress"},
                                                            {"role", "assistant"},
                                                            {"content", json::array{}}}
                                             : json::object{{"id", open_id_},
                                                            {"type", "reasoning"},
                                                            {"summary", json::array{}},
                                                            {"content", json::array{}}};
  out += event("response.output_item.added", {{"output_index", index}, {"item", added}});
  out += event("response.content_part.added",
               {{"item_id", open_id_},
                {"output_index", index},
                {"content_index", 0},
                {"part", item == Item::message ? output_text_part("") : reasoning_text_part("")}});
  open_ = item;
}

void ResponseWriter::close(std::string& out, std::string_view status) {
  if (open_ == Item::none) return;
  int64_t index = static_cast<int64_t>(output_.size());
  bool message = open_ == Item::message;
  json::object part = message ? output_text_part(open_text_) : reasoning_text_part(open_text_);
  json::object place{{"item_id", open_id_}, {"output_index", index}, {"content_index", 0}};
  json::object done = place;
  done["text"] = open_text_;
  if (message) done["logprobs"] = json::array{};
  out += event(message ? "response.output_text.done" : "response.reasoning_text.done", done);
  json::object part_done = place;
  part_done["part"] = part;
  out += event("response.content_part.done", part_done);
  json::object item = message ? json::object{{"id", open_id_},
                                             {"type", "message"},
                                             {"status", status},
                                             {"role", "assistant"},
                                             {"content", json::array{part}}}
                              : json::object{{"id", open_id_},
                                             {"type", "reasoning"},
                                             {"summary", json::array{}},
                                             {"content", json::array{part}}};
  out += event("response.output_item.done", {{"output_index", index}, {"item", item}});
  output_.push_back(std::move(item));
  open_ = Item::none;
}

void ResponseWriter::add_call(const Request& request, const chat::ToolCallDelta& call,
                              std::string& out) {
  close(out, "completed");
  int64_t index = static_cast<int64_t>(output_.size());
  std::string id = item_id(request, "fc_");
  json::object item{{"id", id},           {"type", "function_call"}, {"status", "in_progress"},
                    {"call_id", call.id}, {"name", call.name},       {"arguments", ""}};
  out += event("response.output_item.added", {{"output_index", index}, {"item", item}});
  // A call comes whole (chat::AnswerStream checks it before giving it out): one delta.
  out += event("response.function_call_arguments.delta",
               {{"item_id", id}, {"output_index", index}, {"delta", call.arguments}});
  out += event("response.function_call_arguments.done", {{"item_id", id},
                                                         {"output_index", index},
                                                         {"name", call.name},
                                                         {"arguments", call.arguments}});
  item["status"] = "completed";
  item["arguments"] = call.arguments;
  out += event("response.output_item.done", {{"output_index", index}, {"item", item}});
  output_.push_back(std::move(item));
  calls_.push_back({call.id, call.name, call.arguments});
}

std::string ResponseWriter::push(const Request& request, const Chunk& chunk) {
  std::string out;
  if (finished_) return out;
  if (!started_) {
    out += event("response.created", {{"response", response_object(request, "in_progress")}});
    out += event("response.in_progress", {{"response", response_object(request, "in_progress")}});
    started_ = true;
  }
  chat::AnswerPiece piece = answer_.push(request, chunk);
  if (!piece.reasoning.empty()) {
    open(request, Item::reasoning, out);
    open_text_ += piece.reasoning;
    out += event("response.reasoning_text.delta",
                 {{"item_id", open_id_},
                  {"output_index", static_cast<int64_t>(output_.size())},
                  {"content_index", 0},
                  {"delta", piece.reasoning}});
  }
  if (!piece.text.empty()) {
    open(request, Item::message, out);
    open_text_ += piece.text;
    answer_text_ += piece.text;
    out +=
        event("response.output_text.delta", {{"item_id", open_id_},
                                             {"output_index", static_cast<int64_t>(output_.size())},
                                             {"content_index", 0},
                                             {"delta", piece.text},
                                             {"logprobs", json::array{}}});
  }
  for (const chat::ToolCallDelta& call : piece.calls)
    add_call(request, call, out);
  if (!chunk.is_final()) return out;

  stop_ = piece.stop.value_or(chat::StopReason::stop);
  bool incomplete = incomplete_reason(*stop_) != nullptr;
  bool said_anything = open_ == Item::message || !calls_.empty() ||
                       std::any_of(output_.begin(), output_.end(), [](const json::value& item) {
                         return item.as_object().at("type").as_string() == "message";
                       });
  // An answer with nothing to say still says it: one message with empty text.
  if (!said_anything) open(request, Item::message, out);
  close(out, incomplete ? "incomplete" : "completed");
  usage_ = chunk.usage ? *chunk.usage : request.usage;
  finished_ = true;
  std::string_view status = incomplete ? "incomplete" : "completed";
  out += event(incomplete ? "response.incomplete" : "response.completed",
               {{"response", response_object(request, status)}});
  // A stream is kept now: its client may ask for it as soon as it reads the last event.
  if (request.stream) keep(request);
  return out;
}

std::string ResponseWriter::finish(const Request& request) {
  if (!finished_) {
    // The pipeline ended without a final chunk: the answer as it stands.
    Chunk last;
    last.finish = FinishReason::stop;
    push(request, last);
  }
  keep(request);
  json::object response =
      response_object(request, incomplete_reason(*stop_) ? "incomplete" : "completed");
  return json::serialize(response);
}

void ResponseWriter::keep(const Request& request) {
  if (kept_ || !settings_.store || !store_ || !owner_) return;
  kept_ = true;
  std::vector<Message> conversation = settings_.conversation;
  if (!answer_text_.empty() || !calls_.empty())
    conversation.emplace_back("assistant", answer_text_, calls_);
  std::string status = incomplete_reason(*stop_) ? "incomplete" : "completed";
  store_->put(*owner_, request.id, json::serialize(response_object(request, status)),
              std::move(conversation));
}

std::string ResponseWriter::stream_error(const RequestError& error) {
  json::object data{
      {"code", error.code.empty() ? error.type : error.code},
      {"message", error.message},
      {"param", error.param.empty() ? json::value(nullptr) : json::value(error.param)}};
  return event("error", std::move(data));
}

}  // namespace chatflow::responses
