// The request half of the Responses API: a body read into the chat Request every wire format
// becomes. Input items map onto chat messages: a message item is a message, consecutive
// function_call items are one assistant turn's calls, a function_call_output is a tool message,
// and replayed reasoning items are left out (as a replayed reasoning_content is).
#include <algorithm>

#include <boost/json.hpp>

#include "framework/chat/output_constraint.h"
#include "framework/chat/request_body.h"
#include "framework/chat/tool_calls.h"
#include "framework/responses/responses_protocol.h"

namespace chatflow::responses {
namespace json = boost::json;
using chat::request_body::Fields;
using chat::request_body::invalid;
using chat::request_body::kind_of;
using chat::request_body::object_at;
using chat::request_body::parse_object;
namespace {

[[noreturn]] void unsupported(const std::string& what, const std::string& param,
                              const std::string& code = "unsupported_parameter") {
  invalid(what, param, code);
}

// A message's content: a string, or parts of the types `allowed` names (input_text for what the
// caller says, output_text and refusal for a replayed answer), joined by line breaks.
std::string content_of(const json::value& content, const std::string& param, bool assistant) {
  if (content.is_string()) return std::string(content.get_string());
  if (!content.is_array())
    invalid(
        "'" + param + "' must be a string or an array of content parts, got " + kind_of(content),
        param);
  std::string text;
  size_t index = 0;
  for (const auto& value : content.get_array()) {
    std::string at = param + "[" + std::to_string(index++) + "]";
    Fields part(object_at(value, at), at + ".");
    std::string type = part.string("type", "");
    if (type.empty()) invalid("'" + at + ".type' is required", at + ".type");
    std::string piece;
    if (type == "input_text" && !assistant) {
      piece = part.string("text", "");
      part.refuse_unread({});
    } else if (type == "output_text" && assistant) {
      piece = part.string("text", "");
      part.refuse_unread({"annotations", "logprobs"});
    } else if (type == "refusal" && assistant) {
      piece = part.string("refusal", "");
      part.refuse_unread({});
    } else {
      unsupported("'" + at + ".type' is '" + type + "', which this server does not support here (" +
                      (assistant ? "an assistant message takes output_text and refusal parts"
                                 : "this message takes input_text parts") +
                      ")",
                  at + ".type", "unsupported_content");
    }
    if (!text.empty() && !piece.empty()) text += "\n";
    text += piece;
  }
  return text;
}

// The assistant turn the next call joins: the last message when it is an assistant turn that
// made calls already or said something just before (the items of one answer), else a new one.
Message& assistant_turn(std::vector<Message>& messages, bool after_call_or_answer) {
  if (after_call_or_answer && !messages.empty() && messages.back().role == "assistant")
    return messages.back();
  messages.emplace_back("assistant", "");
  return messages.back();
}

void add_item(const json::value& value, size_t index, std::vector<Message>& messages,
              bool& previous_was_assistant) {
  std::string param = "input[" + std::to_string(index) + "]";
  Fields item(object_at(value, param), param + ".");
  std::string type = item.string("type", "message");
  bool assistant_item = false;
  if (type == "message") {
    std::string role = item.string("role", "");
    if (role != "user" && role != "assistant" && role != "system" && role != "developer")
      invalid(
          "'" + param + ".role' must be user, assistant, system or developer, got '" + role + "'",
          param + ".role");
    if (role == "developer") role = "system";  // OpenAI's newer name for system
    const json::value* content = item.get("content");
    if (!content) invalid("'" + param + ".content' is required", param + ".content");
    bool assistant = role == "assistant";
    messages.emplace_back(role, content_of(*content, param + ".content", assistant));
    // An output item passed back as it came keeps its id and status: they say nothing here.
    item.refuse_unread({"id", "status"});
    assistant_item = assistant;
  } else if (type == "function_call") {
    ToolCall call;
    call.id = item.string("call_id", "");
    call.name = item.string("name", "");
    call.arguments = item.string("arguments", "");
    if (call.id.empty()) invalid("'" + param + ".call_id' is required", param + ".call_id");
    if (call.name.empty()) invalid("'" + param + ".name' is required", param + ".name");
    if (call.arguments.empty()) call.arguments = "{}";
    item.refuse_unread({"id", "status"});
    assistant_turn(messages, previous_was_assistant).tool_calls.push_back(std::move(call));
    assistant_item = true;
  } else if (type == "function_call_output") {
    std::string call_id = item.string("call_id", "");
    if (call_id.empty()) invalid("'" + param + ".call_id' is required", param + ".call_id");
    const json::value* output = item.get("output");
    if (!output) invalid("'" + param + ".output' is required", param + ".output");
    std::string text = content_of(*output, param + ".output", false);
    item.refuse_unread({"id", "status"});
    messages.emplace_back("tool", std::move(text), std::vector<ToolCall>{}, std::move(call_id));
  } else if (type == "reasoning") {
    // Earlier reasoning replayed with the conversation says nothing to the model: accepted, left
    // out, whatever it holds (its summary, content, encrypted_content).
    return;
  } else if (type == "item_reference") {
    unsupported("'" + param +
                    ".type' is 'item_reference', which this server does not resolve; "
                    "send the item itself, or continue with previous_response_id",
                param + ".type", "unsupported_content");
  } else {
    unsupported("'" + param + ".type' is '" + type +
                    "', which this server does not support (input items are messages, "
                    "function_call, function_call_output and reasoning)",
                param + ".type", "unsupported_content");
  }
  previous_was_assistant = assistant_item;
}

// input: a string (one user message) or an array of input items.
std::vector<Message> parse_input(const Fields& fields) {
  const json::value* input = fields.get("input");
  if (!input) invalid("'input' is required", "input");
  std::vector<Message> messages;
  if (input->is_string()) {
    messages.emplace_back("user", std::string(input->get_string()));
    return messages;
  }
  if (!input->is_array())
    invalid(
        std::string("'input' must be a string or an array of input items, got ") + kind_of(*input),
        "input");
  if (input->get_array().empty()) invalid("'input' must hold at least one item", "input");
  bool previous_was_assistant = false;
  for (size_t i = 0; i < input->get_array().size(); ++i)
    add_item(input->get_array()[i], i, messages, previous_was_assistant);
  return messages;
}

// A JSON Schema given as an object (or true/false) checked by the compiler that will enforce it.
std::string schema_text(const json::value& schema, const std::string& param) {
  if (!schema.is_object() && !schema.is_bool())
    invalid("'" + param + "' must be a JSON Schema object, got " + kind_of(schema), param);
  chat::check_json_schema(schema, param);
  return json::serialize(schema);
}

// tools: [{"type": "function", "name", "description", "parameters", "strict"}]. Built-in tools
// (web_search, file_search, computer use, code_interpreter, mcp, ...) are OpenAI's own services.
json::array parse_tools(const Fields& fields, GenerationParams& params) {
  json::array echo;
  const json::value* tools = fields.get("tools");
  if (!tools) return echo;
  if (!tools->is_array())
    invalid(std::string("'tools' must be an array, got ") + kind_of(*tools), "tools");
  if (tools->get_array().size() > 128) invalid("'tools' may hold at most 128 tools", "tools");
  size_t index = 0;
  for (const auto& value : tools->get_array()) {
    std::string param = "tools[" + std::to_string(index++) + "]";
    Fields tool(object_at(value, param), param + ".");
    std::string type = tool.string("type", "");
    if (type != "function") {
      unsupported("'" + param + ".type' is '" + type +
                      "': this server runs no built-in tools; only tools of type \"function\" "
                      "are supported",
                  param + ".type", "unsupported_tool");
    }
    ToolDefinition definition;
    definition.name = tool.string("name", "");
    if (!chat::valid_function_name(definition.name))
      invalid("'" + param + ".name' must be 1 to 64 letters, digits, underscores or dashes",
              param + ".name");
    for (const auto& other : params.tools) {
      if (other.name == definition.name)
        invalid("two tools are named '" + definition.name + "'", param + ".name");
    }
    definition.description = tool.string("description", "");
    const json::value* parameters = tool.get("parameters");
    if (parameters) definition.parameters = schema_text(*parameters, param + ".parameters");
    // The Responses API checks a function's arguments against its schema unless told not to.
    definition.strict = tool.boolean("strict", true);
    tool.refuse_unread({});
    echo.push_back(
        {{"type", "function"},
         {"name", definition.name},
         {"description", definition.description.empty() ? json::value(nullptr)
                                                        : json::value(definition.description)},
         {"parameters", parameters ? *parameters : json::value(nullptr)},
         {"strict", definition.strict}});
    params.tools.push_back(std::move(definition));
  }
  return echo;
}

// tool_choice: "none" | "auto" | "required" | {"type": "function", "name"}.
json::value parse_tool_choice(const Fields& fields, GenerationParams& params) {
  params.tool_choice = params.tools.empty() ? ToolChoice::none : ToolChoice::automatic;
  const json::value* choice = fields.get("tool_choice");
  if (!choice) return "auto";
  if (choice->is_string()) {
    std::string_view mode = choice->get_string();
    if (mode == "none") {
      params.tool_choice = ToolChoice::none;
    } else if (mode == "auto") {
      // Without tools there is nothing to call: as "none".
    } else if (mode == "required") {
      if (params.tools.empty())
        invalid("'tool_choice' is 'required' but no 'tools' are given", "tool_choice");
      params.tool_choice = ToolChoice::required;
    } else {
      invalid(
          "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"name\"}, "
          "got '" +
              std::string(mode) + "'",
          "tool_choice");
    }
    return *choice;
  }
  Fields named(object_at(*choice, "tool_choice"), "tool_choice.");
  std::string type = named.string("type", "");
  if (type != "function") {
    unsupported("'tool_choice.type' is '" + type +
                    "': this server runs no built-in tools and takes no allowed_tools lists; "
                    "choose a function ({\"type\": \"function\", \"name\"})",
                "tool_choice.type", "unsupported_tool");
  }
  std::string name = named.string("name", "");
  named.refuse_unread({});
  bool offered = std::any_of(params.tools.begin(), params.tools.end(),
                             [&](const ToolDefinition& tool) { return tool.name == name; });
  if (!offered)
    invalid("'tool_choice.name' names '" + name + "', which is not one of 'tools'",
            "tool_choice.name");
  params.tool_choice = ToolChoice::function;
  params.tool_choice_function = name;
  return json::object{{"type", "function"}, {"name", name}};
}

// text: {"format": {"type": "text" | "json_object" | "json_schema", "name", "schema", "strict",
// "description"}}, enforced by the same constrained decoding as chat's response_format.
json::object parse_text(const Fields& fields, ResponseFormat& format) {
  json::object echo_format{{"type", "text"}};
  const json::value* text = fields.get("text");
  if (!text) return {{"format", echo_format}};
  Fields text_fields(object_at(*text, "text"), "text.");
  const json::value* value = text_fields.get("format");
  text_fields.refuse_unread({});
  if (!value) return {{"format", echo_format}};
  Fields format_fields(object_at(*value, "text.format"), "text.format.");
  std::string type = format_fields.string("type", "");
  if (type == "text") {
    format.kind = ResponseFormat::Kind::text;
  } else if (type == "json_object") {
    format.kind = ResponseFormat::Kind::json_object;
    echo_format = {{"type", "json_object"}};
  } else if (type == "json_schema") {
    format.kind = ResponseFormat::Kind::json_schema;
    format.name = format_fields.string("name", "");
    if (format.name.empty()) invalid("'text.format.name' is required", "text.format.name");
    const json::value* schema = format_fields.get("schema");
    if (!schema) invalid("'text.format.schema' is required", "text.format.schema");
    format.schema = schema_text(*schema, "text.format.schema");
    format.strict = format_fields.boolean("strict", false);
    std::string description = format_fields.string("description", "");
    echo_format = {{"type", "json_schema"},
                   {"name", format.name},
                   {"schema", *schema},
                   {"strict", format.strict}};
    if (!description.empty()) echo_format["description"] = description;
  } else {
    invalid("'text.format.type' must be text, json_object or json_schema, got '" + type + "'",
            "text.format.type");
  }
  format_fields.refuse_unread({});
  return {{"format", echo_format}};
}

// metadata: at most 16 string values, keys up to 64 characters and values up to 512, as OpenAI
// takes them; answered back with the response.
json::object parse_metadata(const Fields& fields) {
  const json::value* value = fields.get("metadata");
  if (!value) return {};
  const json::object& metadata = object_at(*value, "metadata");
  if (metadata.size() > 16) invalid("'metadata' may hold at most 16 keys", "metadata");
  for (const auto& entry : metadata) {
    std::string param = "metadata." + std::string(entry.key());
    if (entry.key().size() > 64) invalid("'metadata' keys are at most 64 characters", param);
    if (!entry.value().is_string() || entry.value().get_string().size() > 512)
      invalid("'" + param + "' must be a string of at most 512 characters", param);
  }
  return metadata;
}

// What the server does not do, each refused by name with what to do instead.
void refuse_unsupported(const Fields& fields) {
  if (fields.boolean("background", false))
    unsupported(
        "'background' responses are not supported by this server; send the request "
        "without it (or with \"stream\": true to read the answer as it comes)",
        "background");
  if (const json::array* include = fields.array("include")) {
    for (size_t i = 0; i < include->size(); ++i) {
      std::string param = "include[" + std::to_string(i) + "]";
      std::string what = (*include)[i].is_string() ? std::string((*include)[i].get_string())
                                                   : std::string(kind_of((*include)[i]));
      unsupported(
          "'" + param + "' asks for '" + what + "', which this server does not return; remove it",
          param);
    }
  }
  std::string truncation = fields.string("truncation", "disabled");
  if (truncation != "disabled")
    unsupported("'truncation' must be \"disabled\" here, got '" + truncation +
                    "': this server does not drop turns to fit the context",
                "truncation");
}

}  // namespace

ResponsesRequest parse_request(std::string_view body, Request& request,
                               const std::vector<std::string>& served_models,
                               const ResponseKeeper& store,
                               const std::optional<std::string>& owner) {
  json::value document = parse_object(body);
  Fields fields(document.get_object(), "");
  ResponsesRequest parsed;
  json::object& echo = parsed.echo;
  request.kind = RequestKind::chat;
  request.model = fields.string("model", "");
  if (request.model.empty()) invalid("'model' is required", "model");
  if (std::find(served_models.begin(), served_models.end(), request.model) == served_models.end()) {
    throw RequestFailure(RequestError{404, "invalid_request_error",
                                      "The model '" + request.model + "' does not exist",
                                      "model_not_found", "model"});
  }
  refuse_unsupported(fields);
  std::vector<Message> input = parse_input(fields);
  std::string instructions = fields.string("instructions", "");
  echo["instructions"] = instructions.empty() ? json::value(nullptr) : json::value(instructions);

  GenerationParams& generation = request.generation;
  echo["tools"] = parse_tools(fields, generation);
  echo["tool_choice"] = parse_tool_choice(fields, generation);
  generation.parallel_tool_calls = fields.boolean("parallel_tool_calls", true);
  echo["parallel_tool_calls"] = generation.parallel_tool_calls;
  echo["text"] = parse_text(fields, generation.response_format);
  std::optional<int64_t> max_output_tokens =
      fields.optional_integer("max_output_tokens", 1, 1 << 20);
  generation.max_tokens = max_output_tokens.value_or(0);
  echo["max_output_tokens"] = max_output_tokens ? json::value(*max_output_tokens) : nullptr;
  generation.temperature = static_cast<float>(fields.number("temperature", 1.0, 0.0, 2.0));
  generation.top_p = static_cast<float>(fields.number("top_p", 1.0, 0.0, 1.0));
  if (generation.top_p == 0.0f) invalid("'top_p' must be greater than 0", "top_p");
  echo["temperature"] = fields.get("temperature") ? *fields.get("temperature") : json::value(1.0);
  echo["top_p"] = fields.get("top_p") ? *fields.get("top_p") : json::value(1.0);
  // vLLM's extension, as chat completions take it: generate max_output_tokens whatever the model
  // says.
  generation.ignore_eos = fields.boolean("ignore_eos", false);
  request.stream = fields.boolean("stream", false);
  // A client-chosen label: an identity only ever comes from the credential.
  request.end_user = fields.string("user", "");
  echo["user"] = request.end_user.empty() ? json::value(nullptr) : json::value(request.end_user);
  echo["metadata"] = parse_metadata(fields);
  echo["truncation"] = "disabled";
  echo["reasoning"] = json::object{{"effort", nullptr}, {"summary", nullptr}};

  parsed.store = fields.boolean("store", true);
  bool store_given = fields.get("store") != nullptr;
  if (parsed.store && !owner) {
    // Stored responses are the caller's own: a credential that names nobody can keep none.
    if (store_given)
      invalid(
          "your credential names no user, so no response can be kept for you: send "
          "\"store\": false, or use a token with a user claim or an API key",
          "store", "no_response_owner");
    parsed.store = false;
  }
  echo["store"] = parsed.store;
  std::string previous = fields.string("previous_response_id", "");
  echo["previous_response_id"] = previous.empty() ? json::value(nullptr) : json::value(previous);
  if (!previous.empty()) {
    auto earlier = owner ? store.conversation(*owner, previous) : std::nullopt;
    if (!earlier)
      invalid("Previous response with id '" + previous + "' not found.", "previous_response_id",
              "previous_response_not_found");
    parsed.conversation = std::move(*earlier);
  }
  parsed.conversation.insert(parsed.conversation.end(), input.begin(), input.end());
  // The instructions lead this request only: a response that continues from it gives its own.
  if (!instructions.empty()) request.messages.emplace_back("system", instructions);
  request.messages.insert(request.messages.end(), parsed.conversation.begin(),
                          parsed.conversation.end());
  // OpenAI's routing tier has no meaning here.
  fields.refuse_unread({"service_tier"});
  return parsed;
}

}  // namespace chatflow::responses
