#include "framework/anthropic/messages_protocol.h"

#include <algorithm>

#include <boost/json.hpp>

#include "framework/chat/output_constraint.h"
#include "framework/chat/request_body.h"
#include "framework/chat/stop_sequence.h"
#include "framework/chat/tool_calls.h"

namespace chatflow::anthropic {
namespace json = boost::json;
using chat::request_body::Fields;
using chat::request_body::invalid;
using chat::request_body::kind_of;
using chat::request_body::object_at;
using chat::request_body::parse_object;
namespace {

// The type of one content block, which every block must have.
std::string block_type(const Fields& block, const std::string& param) {
  std::string type = block.string("type", "");
  if (type.empty()) invalid("'" + param + ".type' is required", param + ".type");
  return type;
}

[[noreturn]] void unsupported_block(const std::string& type, const std::string& param,
                                    std::string_view allowed) {
  invalid("'" + param + ".type' is '" + type + "', which this server does not support here (" +
              std::string(allowed) + ")",
          param + ".type", "unsupported_content");
}

// Text given as a string or as text blocks ({"type": "text", "text"}): system, tool_result.
std::string text_of(const json::value& value, const std::string& param) {
  if (value.is_string()) return std::string(value.get_string());
  if (!value.is_array())
    invalid("'" + param + "' must be a string or an array of text blocks, got " + kind_of(value),
            param);
  std::string text;
  size_t index = 0;
  for (const auto& item : value.get_array()) {
    std::string at = param + "[" + std::to_string(index++) + "]";
    Fields block(object_at(item, at), at + ".");
    std::string type = block_type(block, at);
    if (type != "text") unsupported_block(type, at, "text");
    if (!text.empty()) text += "\n";
    text += block.string("text", "");
    block.refuse_unread({"cache_control", "citations"});
  }
  return text;
}

// One message's content blocks, in the order the model must see them: a user turn's tool
// results become tool messages (answering the calls of the turn before), its text a user
// message; an assistant turn's text and tool_use blocks one assistant message with its calls.
void add_message(const json::value& item, size_t index, std::vector<Message>& messages) {
  std::string param = "messages[" + std::to_string(index) + "]";
  Fields message(object_at(item, param), param + ".");
  std::string role = message.string("role", "");
  if (role != "user" && role != "assistant")
    invalid("'" + param + ".role' must be user or assistant, got '" + role + "'", param + ".role");
  const json::value* content = message.get("content");
  if (!content) invalid("'" + param + ".content' is required", param + ".content");
  message.refuse_unread({});
  if (content->is_string()) {
    messages.emplace_back(role, std::string(content->get_string()));
    return;
  }
  if (!content->is_array())
    invalid("'" + param + ".content' must be a string or an array of content blocks, got " +
                kind_of(*content),
            param + ".content");
  Message turn(role, "");
  size_t block_index = 0;
  for (const auto& value : content->get_array()) {
    std::string at = param + ".content[" + std::to_string(block_index++) + "]";
    Fields block(object_at(value, at), at + ".");
    std::string type = block_type(block, at);
    if (type == "text") {
      if (!turn.content.empty()) turn.content += "\n";
      turn.content += block.string("text", "");
      block.refuse_unread({"cache_control", "citations"});
    } else if (type == "tool_use" && role == "assistant") {
      ToolCall call;
      call.id = block.string("id", "");
      call.name = block.string("name", "");
      if (call.id.empty()) invalid("'" + at + ".id' is required", at + ".id");
      if (call.name.empty()) invalid("'" + at + ".name' is required", at + ".name");
      const json::value* input = block.get("input");
      call.arguments = input ? json::serialize(object_at(*input, at + ".input")) : "{}";
      block.refuse_unread({"cache_control"});
      turn.tool_calls.push_back(std::move(call));
    } else if (type == "tool_result" && role == "user") {
      std::string id = block.string("tool_use_id", "");
      if (id.empty()) invalid("'" + at + ".tool_use_id' is required", at + ".tool_use_id");
      const json::value* result = block.get("content");
      std::string text = result ? text_of(*result, at + ".content") : std::string();
      // The model reads a failed call's result as one: the client's flag becomes words.
      if (block.boolean("is_error", false)) text = "Error: " + text;
      block.refuse_unread({"cache_control"});
      messages.emplace_back("tool", std::move(text), std::vector<ToolCall>{}, std::move(id));
    } else if ((type == "thinking" || type == "redacted_thinking") && role == "assistant") {
      // Earlier reasoning replayed with the conversation says nothing to the model (as a replayed
      // reasoning_content in chat completions): accepted, left out.
    } else {
      unsupported_block(type, at,
                        role == "user" ? "a user message takes text and tool_result blocks"
                                       : "an assistant message takes text, tool_use and thinking "
                                         "blocks");
    }
  }
  if (!turn.content.empty() || !turn.tool_calls.empty()) messages.push_back(std::move(turn));
}

// tools: [{"name", "description", "input_schema"}] (client tools; "type": "custom" or absent).
void parse_tools(const Fields& fields, GenerationParams& params) {
  const json::array* tools = fields.array("tools");
  if (tools) {
    if (tools->size() > 128) invalid("'tools' may hold at most 128 tools", "tools");
    size_t index = 0;
    for (const auto& item : *tools) {
      std::string param = "tools[" + std::to_string(index++) + "]";
      Fields tool(object_at(item, param), param + ".");
      std::string type = tool.string("type", "custom");
      if (type != "custom") {
        invalid("'" + param + ".type' is '" + type +
                    "': this server runs no server tools; only client tools (\"custom\") are "
                    "supported",
                param + ".type", "unsupported_tool");
      }
      ToolDefinition definition;
      definition.name = tool.string("name", "");
      if (!chat::valid_function_name(definition.name)) {
        invalid("'" + param + ".name' must be 1 to 64 letters, digits, underscores or dashes",
                param + ".name");
      }
      for (const auto& other : params.tools) {
        if (other.name == definition.name)
          invalid("two tools are named '" + definition.name + "'", param + ".name");
      }
      definition.description = tool.string("description", "");
      const json::value* schema = tool.get("input_schema");
      if (!schema) invalid("'" + param + ".input_schema' is required", param + ".input_schema");
      chat::check_json_schema(object_at(*schema, param + ".input_schema"), param + ".input_schema");
      definition.parameters = json::serialize(*schema);
      tool.refuse_unread({"cache_control"});
      params.tools.push_back(std::move(definition));
    }
  }
  params.tool_choice = params.tools.empty() ? ToolChoice::none : ToolChoice::automatic;
  const json::value* choice = fields.get("tool_choice");
  if (!choice) return;
  Fields named(object_at(*choice, "tool_choice"), "tool_choice.");
  std::string type = named.string("type", "");
  params.parallel_tool_calls = !named.boolean("disable_parallel_tool_use", false);
  if (type == "none") {
    params.tool_choice = ToolChoice::none;
  } else if (params.tools.empty()) {
    invalid("'tool_choice' of type '" + type + "' needs 'tools'", "tool_choice");
  } else if (type == "auto") {
    params.tool_choice = ToolChoice::automatic;
  } else if (type == "any") {
    params.tool_choice = ToolChoice::required;
  } else if (type == "tool") {
    std::string name = named.string("name", "");
    bool offered = std::any_of(params.tools.begin(), params.tools.end(),
                               [&](const ToolDefinition& tool) { return tool.name == name; });
    if (!offered)
      invalid("'tool_choice.name' names '" + name + "', which is not one of 'tools'",
              "tool_choice.name");
    params.tool_choice = ToolChoice::function;
    params.tool_choice_function = name;
  } else {
    invalid("'tool_choice.type' must be auto, any, tool or none, got '" + type + "'",
            "tool_choice.type");
  }
  named.refuse_unread({});
}

}  // namespace

namespace {

// What a Messages request and a token count share: the model, the conversation and its tools.
void parse_conversation(const Fields& fields, Request& request,
                        const std::vector<std::string>& served_models) {
  request.kind = RequestKind::chat;
  request.model = fields.string("model", "");
  if (request.model.empty()) invalid("'model' is required", "model");
  if (std::find(served_models.begin(), served_models.end(), request.model) == served_models.end()) {
    throw RequestFailure(RequestError{404, "not_found_error",
                                      "The model '" + request.model + "' does not exist",
                                      "model_not_found", "model"});
  }
  if (const json::value* system = fields.get("system")) {
    std::string text = text_of(*system, "system");
    if (!text.empty()) request.messages.emplace_back("system", std::move(text));
  }
  const json::array* messages = fields.array("messages");
  if (!messages) invalid("'messages' is required", "messages");
  if (messages->empty()) invalid("'messages' must contain at least one message", "messages");
  for (size_t i = 0; i < messages->size(); ++i)
    add_message((*messages)[i], i, request.messages);
  parse_tools(fields, request.generation);
}

}  // namespace

void parse_messages_request(std::string_view body, Request& request,
                            const std::vector<std::string>& served_models) {
  json::value document = parse_object(body);
  Fields fields(document.get_object(), "");
  parse_conversation(fields, request, served_models);
  // Anthropic requires it: an answer's length is the caller's decision, never a default.
  std::optional<int64_t> max_tokens = fields.optional_integer("max_tokens", 1, 1 << 20);
  if (!max_tokens) invalid("'max_tokens' is required", "max_tokens");
  request.generation.max_tokens = *max_tokens;
  request.generation.temperature = static_cast<float>(fields.number("temperature", 1.0, 0.0, 1.0));
  request.generation.top_p = static_cast<float>(fields.number("top_p", 1.0, 0.0, 1.0));
  if (request.generation.top_p == 0.0f) invalid("'top_p' must be greater than 0", "top_p");
  request.generation.top_k = static_cast<int>(fields.integer("top_k", 0, 0, 1 << 20));
  if (const json::array* stops = fields.array("stop_sequences")) {
    for (size_t i = 0; i < stops->size(); ++i) {
      const json::value& stop = (*stops)[i];
      std::string param = "stop_sequences[" + std::to_string(i) + "]";
      if (!stop.is_string() || stop.get_string().empty())
        invalid("'" + param + "' must be a string that is not empty", param);
      request.generation.stop.push_back(std::string(stop.get_string()));
    }
  }
  // vLLM's extension, as chat completions take it: generate max_tokens whatever the model says.
  request.generation.ignore_eos = fields.boolean("ignore_eos", false);
  request.stream = fields.boolean("stream", false);
  if (const json::value* metadata = fields.get("metadata")) {
    Fields members(object_at(*metadata, "metadata"), "metadata.");
    // A client-chosen label, as OpenAI's `user`: an identity only ever comes from the credential.
    request.end_user = members.string("user_id", "");
    members.refuse_unread({});
  }
  // service_tier picks Anthropic's capacity, which has no meaning here.
  fields.refuse_unread({"service_tier"});
}

void parse_count_tokens_request(std::string_view body, Request& request,
                                const std::vector<std::string>& served_models) {
  json::value document = parse_object(body);
  Fields fields(document.get_object(), "");
  parse_conversation(fields, request, served_models);
  fields.refuse_unread({});
}

std::string count_tokens_json(int64_t input_tokens) {
  return json::serialize(json::object{{"input_tokens", input_tokens}});
}

void adopt_api_key(HeaderFields& headers) {
  std::string key;
  for (const auto& [name, value] : headers) {
    if (name == "authorization") return;
    if (name == "x-api-key") key = value;
  }
  if (!key.empty()) headers.emplace_back("authorization", "Bearer " + key);
}

std::string_view error_type(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
      return "overloaded_error";
    case 504:
      return "timeout_error";
    default:
      return status >= 400 && status < 500 ? "invalid_request_error" : "api_error";
  }
}

std::string error_json(const RequestError& error) {
  return json::serialize(json::object{
      {"type", "error"},
      {"error", json::object{{"type", error_type(error.status)}, {"message", error.message}}}});
}

std::string stream_error_event(const RequestError& error) {
  return "event: error\ndata: " + error_json(error) + "\n\n";
}

namespace {

std::string_view stop_reason(chat::StopReason reason, const Request& request) {
  switch (reason) {
    case chat::StopReason::stop:
      return chat::matched_stop_sequence(request) ? "stop_sequence" : "end_turn";
    case chat::StopReason::length:
      return "max_tokens";
    case chat::StopReason::tool_calls:
      return "tool_use";
    case chat::StopReason::content_filter:
      return "refusal";
  }
  return "end_turn";
}

// A call's arguments as the JSON object Anthropic's `input` is ({} for any that are not one:
// calls read from text are checked objects, an upstream's are passed on as they came).
json::value input_of(const std::string& arguments) {
  json::error_code error;
  json::value input = json::parse(arguments, error);
  return !error && input.is_object() ? input : json::value(json::object{});
}

json::object usage_json(const Usage& usage) {
  return {{"input_tokens", usage.prompt_tokens}, {"output_tokens", usage.completion_tokens}};
}

// The stop string that ended the answer (null for any other end).
json::value stop_sequence(chat::StopReason reason, const Request& request) {
  std::optional<std::string> matched;
  if (reason == chat::StopReason::stop) matched = chat::matched_stop_sequence(request);
  return matched ? json::value(*matched) : json::value(nullptr);
}

std::string event(std::string_view name, const json::object& data) {
  return "event: " + std::string(name) + "\ndata: " + json::serialize(data) + "\n\n";
}

}  // namespace

std::string message_json(const Request& request, const chat::GatheredAnswer& answer) {
  json::array content;
  if (!answer.reasoning.empty()) {
    content.push_back(
        json::object{{"type", "thinking"}, {"thinking", answer.reasoning}, {"signature", ""}});
  }
  if (!answer.text.empty() || answer.calls.empty())
    content.push_back(json::object{{"type", "text"}, {"text", answer.text}});
  for (const ToolCall& call : answer.calls) {
    content.push_back(json::object{{"type", "tool_use"},
                                   {"id", call.id},
                                   {"name", call.name},
                                   {"input", input_of(call.arguments)}});
  }
  json::object message{{"id", request.id},
                       {"type", "message"},
                       {"role", "assistant"},
                       {"model", request.model},
                       {"content", std::move(content)},
                       {"stop_reason", stop_reason(answer.stop, request)},
                       {"stop_sequence", stop_sequence(answer.stop, request)},
                       {"usage", usage_json(request.usage)}};
  return json::serialize(message);
}

void MessagesSseEncoder::open(Block block, std::string& out) {
  if (open_ == block) return;
  close(out);
  json::object start = block == Block::thinking
                           ? json::object{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}
                           : json::object{{"type", "text"}, {"text", ""}};
  out += event("content_block_start", {{"type", "content_block_start"},
                                       {"index", next_index_},
                                       {"content_block", std::move(start)}});
  open_ = block;
}

void MessagesSseEncoder::close(std::string& out) {
  if (open_ == Block::none) return;
  out += event("content_block_stop", {{"type", "content_block_stop"}, {"index", next_index_}});
  ++next_index_;
  open_ = Block::none;
}

std::string MessagesSseEncoder::encode(const Request& request, const Chunk& chunk) {
  std::string out;
  if (!started_) {
    json::object message{
        {"id", request.id},         {"type", "message"},
        {"role", "assistant"},      {"model", request.model},
        {"content", json::array{}}, {"stop_reason", nullptr},
        {"stop_sequence", nullptr}, {"usage", usage_json({request.usage.prompt_tokens, 0, 0})}};
    out += event("message_start", {{"type", "message_start"}, {"message", std::move(message)}});
    out += event("ping", {{"type", "ping"}});
    started_ = true;
  }
  chat::AnswerPiece piece = answer_.push(request, chunk);
  if (!piece.reasoning.empty()) {
    open(Block::thinking, out);
    out += event("content_block_delta",
                 {{"type", "content_block_delta"},
                  {"index", next_index_},
                  {"delta", {{"type", "thinking_delta"}, {"thinking", piece.reasoning}}}});
  }
  if (!piece.text.empty()) {
    open(Block::text, out);
    out +=
        event("content_block_delta", {{"type", "content_block_delta"},
                                      {"index", next_index_},
                                      {"delta", {{"type", "text_delta"}, {"text", piece.text}}}});
  }
  for (const chat::ToolCallDelta& call : piece.calls) {
    close(out);
    json::object block{
        {"type", "tool_use"}, {"id", call.id}, {"name", call.name}, {"input", json::object{}}};
    out += event("content_block_start", {{"type", "content_block_start"},
                                         {"index", next_index_},
                                         {"content_block", std::move(block)}});
    json::object delta{{"type", "input_json_delta"},
                       {"partial_json", json::serialize(input_of(call.arguments))}};
    out += event(
        "content_block_delta",
        {{"type", "content_block_delta"}, {"index", next_index_}, {"delta", std::move(delta)}});
    out += event("content_block_stop", {{"type", "content_block_stop"}, {"index", next_index_}});
    ++next_index_;
  }
  if (chunk.is_final()) {
    close(out);
    Usage usage = chunk.usage ? *chunk.usage : request.usage;
    chat::StopReason reason = piece.stop.value_or(chat::StopReason::stop);
    json::object delta{{"stop_reason", stop_reason(reason, request)},
                       {"stop_sequence", stop_sequence(reason, request)}};
    out += event(
        "message_delta",
        {{"type", "message_delta"}, {"delta", std::move(delta)}, {"usage", usage_json(usage)}});
    out += event("message_stop", {{"type", "message_stop"}});
  }
  return out;
}

}  // namespace chatflow::anthropic
