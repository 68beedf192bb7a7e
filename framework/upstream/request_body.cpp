#include "framework/upstream/request_body.h"

#include <boost/json.hpp>

namespace chatflow::upstream {
namespace json = boost::json;

namespace {

json::value parsed_or_text(const std::string& text) {
  boost::system::error_code error;
  json::value value = json::parse(text, error);
  return error ? json::value(text) : value;
}

json::array messages_json(const Request& request) {
  json::array messages;
  for (const auto& message : request.messages) {
    json::object entry{{"role", message.role}, {"content", message.content}};
    if (!message.tool_calls.empty()) {
      json::array calls;
      for (const auto& call : message.tool_calls) {
        calls.push_back(json::object{
            {"id", call.id},
            {"type", "function"},
            {"function", json::object{{"name", call.name}, {"arguments", call.arguments}}}});
      }
      entry["tool_calls"] = std::move(calls);
    }
    if (!message.tool_call_id.empty()) entry["tool_call_id"] = message.tool_call_id;
    messages.push_back(std::move(entry));
  }
  return messages;
}

void add_tools(const GenerationParams& generation, json::object& body) {
  if (generation.tools.empty()) return;
  json::array tools;
  for (const auto& tool : generation.tools) {
    json::object function{{"name", tool.name}};
    if (!tool.description.empty()) function["description"] = tool.description;
    if (!tool.parameters.empty()) function["parameters"] = parsed_or_text(tool.parameters);
    if (tool.strict) function["strict"] = true;
    tools.push_back(json::object{{"type", "function"}, {"function", std::move(function)}});
  }
  body["tools"] = std::move(tools);
  switch (generation.tool_choice) {
    case ToolChoice::none:
      body["tool_choice"] = "none";
      break;
    case ToolChoice::automatic:
      body["tool_choice"] = "auto";
      break;
    case ToolChoice::required:
      body["tool_choice"] = "required";
      break;
    case ToolChoice::function:
      body["tool_choice"] =
          json::object{{"type", "function"},
                       {"function", json::object{{"name", generation.tool_choice_function}}}};
      break;
  }
  if (!generation.parallel_tool_calls) body["parallel_tool_calls"] = false;
}

void add_response_format(const ResponseFormat& format, json::object& body) {
  switch (format.kind) {
    case ResponseFormat::Kind::text:
      return;
    case ResponseFormat::Kind::json_object:
      body["response_format"] = json::object{{"type", "json_object"}};
      return;
    case ResponseFormat::Kind::json_schema: {
      json::object schema{{"name", format.name}, {"schema", parsed_or_text(format.schema)}};
      if (format.strict) schema["strict"] = true;
      body["response_format"] =
          json::object{{"type", "json_schema"}, {"json_schema", std::move(schema)}};
      return;
    }
  }
}

}  // namespace

std::string request_path(const Request& request) {
  return request.kind == RequestKind::chat ? "/v1/chat/completions" : "/v1/completions";
}

std::string request_body(const Request& request, const std::string& model, int64_t max_tokens) {
  const GenerationParams& generation = request.generation;
  json::object body{{"model", model}, {"stream", true}};
  body["stream_options"] = json::object{{"include_usage", true}};
  if (request.kind == RequestKind::chat) {
    body["messages"] = messages_json(request);
  } else {
    body["prompt"] = request.prompt;
  }
  // The pipeline's gates reserved prompt + max_tokens, so the engine must not write more than
  // that (the gateway cuts an engine that does: upstream_generate.cpp).
  if (max_tokens > 0) body["max_tokens"] = max_tokens;
  body["temperature"] = generation.temperature;
  body["top_p"] = generation.top_p;
  // Beyond OpenAI's parameters: vLLM, llama.cpp's server and chatflow read these; each is sent
  // only when it is not the default, so an engine that does not know it never sees it.
  if (generation.top_k > 0) body["top_k"] = generation.top_k;
  if (generation.min_p > 0) body["min_p"] = generation.min_p;
  if (generation.repetition_penalty != 1.0f)
    body["repetition_penalty"] = generation.repetition_penalty;
  if (generation.ignore_eos) body["ignore_eos"] = true;
  if (generation.presence_penalty != 0) body["presence_penalty"] = generation.presence_penalty;
  if (generation.frequency_penalty != 0) body["frequency_penalty"] = generation.frequency_penalty;
  if (generation.seed) body["seed"] = *generation.seed;
  if (!generation.stop.empty()) {
    json::array stop;
    for (const auto& text : generation.stop)
      stop.emplace_back(text);
    body["stop"] = std::move(stop);
  }
  if (request.kind == RequestKind::chat) {
    add_tools(generation, body);
    add_response_format(generation.response_format, body);
    if (!request.chat_template_kwargs.empty())
      body["chat_template_kwargs"] = parsed_or_text(request.chat_template_kwargs);
  }
  if (!request.end_user.empty()) body["user"] = request.end_user;
  return json::serialize(body);
}

}  // namespace chatflow::upstream
