#include "framework/openai/openai_protocol.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>

#include <boost/json.hpp>

#include "framework/chat/output_constraint.h"
#include "framework/chat/request_body.h"
#include "framework/chat/tool_calls.h"
#include "framework/openai/retract.h"
#include "framework/openai/session_extensions.h"
#include "framework/text/utf8.h"

namespace chatflow::openai {
namespace json = boost::json;
using chat::check_json_schema;
using chat::valid_function_name;
using chat::request_body::Fields;
using chat::request_body::invalid;
using chat::request_body::kind_of;
using chat::request_body::parse_object;
namespace {

// Message content: a string, or an array of {"type": "text", "text": ...} parts.
std::string content_of(const json::value& content, size_t index) {
  std::string param = "messages[" + std::to_string(index) + "].content";
  if (content.is_string()) return std::string(content.get_string());
  if (content.is_null()) return {};
  if (!content.is_array())
    invalid("'" + param + "' must be a string or an array of text parts, got " + kind_of(content),
            param);
  std::string text;
  for (const auto& part : content.get_array()) {
    const json::object* object = part.if_object();
    const json::value* type = object ? object->if_contains("type") : nullptr;
    const json::value* part_text = object ? object->if_contains("text") : nullptr;
    if (!type || !type->is_string() || type->get_string() != "text" || !part_text ||
        !part_text->is_string()) {
      invalid("'" + param +
                  "' parts must be {\"type\": \"text\", \"text\": ...}; only text is supported",
              param);
    }
    text += part_text->get_string();
  }
  return text;
}

}  // namespace

TokenizeRequest parse_tokenize_request(std::string_view body) {
  json::value document = parse_object(body);
  Fields fields(document.get_object());
  TokenizeRequest request;
  request.model = fields.string("model", "");
  const json::value* text = fields.get("prompt");
  const char* name = "prompt";
  if (!text) {
    text = fields.get("content");
    name = "content";
  }
  if (!text) invalid("'prompt' is required", "prompt");
  if (!text->is_string())
    invalid(std::string("'") + name + "' must be a string, got " + kind_of(*text), name);
  request.text = std::string(text->get_string());
  request.add_special = fields.boolean("add_special_tokens", fields.boolean("add_special", true));
  return request;
}

DetokenizeRequest parse_detokenize_request(std::string_view body) {
  json::value document = parse_object(body);
  Fields fields(document.get_object());
  DetokenizeRequest request;
  request.model = fields.string("model", "");
  const json::value* tokens = fields.get("tokens");
  if (!tokens) invalid("'tokens' is required", "tokens");
  if (!tokens->is_array())
    invalid(std::string("'tokens' must be an array of integers, got ") + kind_of(*tokens),
            "tokens");
  for (const auto& token : tokens->get_array()) {
    if (!token.is_int64() || token.get_int64() < 0 || token.get_int64() > INT32_MAX) {
      invalid("'tokens' must hold token ids (non-negative integers)", "tokens");
    }
    request.tokens.push_back(static_cast<int32_t>(token.get_int64()));
  }
  return request;
}

CacheCorrection parse_cache_correction(std::string_view body) {
  json::value document = parse_object(body);
  Fields fields(document.get_object());
  CacheCorrection correction;
  correction.tenant = fields.string("tenant", "");
  correction.model = fields.string("model", "");
  correction.everything = fields.boolean("all", false);
  correction.prompt = fields.string("prompt", "");
  if (const json::value* messages = fields.get("messages")) {
    if (!messages->is_array()) invalid("'messages' must be an array", "messages");
    for (const auto& item : messages->get_array()) {
      const json::object* message = item.if_object();
      const json::value* role = message ? message->if_contains("role") : nullptr;
      const json::value* content = message ? message->if_contains("content") : nullptr;
      if (!role || !role->is_string() || !content || !content->is_string())
        invalid("each message needs a string 'role' and 'content'", "messages");
      std::string role_text(role->get_string());
      if (role_text == "developer") role_text = "system";
      correction.messages.push_back({role_text, std::string(content->get_string())});
    }
  }
  if (!correction.everything && correction.messages.empty() && correction.prompt.empty())
    invalid("say what to forget: 'messages', 'prompt', or \"all\": true");
  return correction;
}

std::string parse_session_title(std::string_view body) {
  json::value document = parse_object(body);
  Fields fields(document.get_object());
  const json::value* value = fields.get("title");
  fields.refuse_unread({});
  if (!value) invalid("'title' is required", "title");
  if (!value->is_string())
    invalid(std::string("'title' must be a string, got ") + kind_of(*value), "title");
  std::string_view title(value->get_string().data(), value->get_string().size());
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  size_t first = title.find_first_not_of(kSpace);
  title = first == std::string_view::npos
              ? std::string_view()
              : title.substr(first, title.find_last_not_of(kSpace) - first + 1);
  size_t characters = text::decode(title).size();
  if (characters == 0 || characters > kMaxSessionTitle) {
    invalid("'title' must have 1 to " + std::to_string(kMaxSessionTitle) +
                " characters besides surrounding whitespace, got " + std::to_string(characters),
            "title");
  }
  return std::string(title);
}

namespace {

std::string parse_model(const Fields& fields, const std::vector<std::string>& served_models) {
  std::string model = fields.string("model", "");
  if (model.empty()) invalid("'model' is required", "model");
  if (std::find(served_models.begin(), served_models.end(), model) == served_models.end()) {
    throw RequestFailure(RequestError{404, "invalid_request_error",
                                      "The model '" + model + "' does not exist", "model_not_found",
                                      "model"});
  }
  return model;
}

// OpenAI's assistant tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}].
std::vector<ToolCall> parse_message_tool_calls(const json::value& value, const std::string& param) {
  if (!value.is_array()) invalid("'" + param + "' must be an array, got " + kind_of(value), param);
  std::vector<ToolCall> calls;
  size_t index = 0;
  for (const auto& item : value.get_array()) {
    std::string at = param + "[" + std::to_string(index++) + "]";
    if (!item.is_object()) invalid("'" + at + "' must be an object, got " + kind_of(item), at);
    Fields call(item.get_object(), at + ".");
    if (call.string("type", "function") != "function")
      invalid("'" + at + ".type' must be \"function\"", at + ".type");
    ToolCall parsed;
    parsed.id = call.string("id", "");
    if (parsed.id.empty()) invalid("'" + at + ".id' is required", at + ".id");
    const json::value* function = call.get("function");
    if (!function || !function->is_object())
      invalid("'" + at + ".function' is required and must be an object", at + ".function");
    Fields function_fields(function->get_object(), at + ".function.");
    parsed.name = function_fields.string("name", "");
    if (parsed.name.empty())
      invalid("'" + at + ".function.name' is required", at + ".function.name");
    parsed.arguments = function_fields.string("arguments", "{}");
    function_fields.refuse_unread({});
    call.refuse_unread({});
    calls.push_back(std::move(parsed));
  }
  return calls;
}

std::vector<Message> parse_messages(const Fields& fields) {
  const json::value* messages = fields.get("messages");
  if (!messages) invalid("'messages' is required", "messages");
  if (!messages->is_array())
    invalid(std::string("'messages' must be an array, got ") + kind_of(*messages), "messages");
  if (messages->get_array().empty())
    invalid("'messages' must contain at least one message", "messages");
  std::vector<Message> parsed;
  size_t index = 0;
  for (const auto& item : messages->get_array()) {
    std::string param = "messages[" + std::to_string(index) + "]";
    if (!item.is_object())
      invalid("'" + param + "' must be an object, got " + kind_of(item), param);
    Fields message(item.get_object(), param + ".");
    const json::value* role = message.get("role");
    if (!role || !role->is_string())
      invalid("'" + param + ".role' is required and must be a string", param + ".role");
    std::string role_text(role->get_string());
    if (role_text == "developer") role_text = "system";  // OpenAI's newer name for system
    if (role_text != "system" && role_text != "user" && role_text != "assistant" &&
        role_text != "tool") {
      invalid("'" + param + ".role' must be system, developer, user, assistant or tool, got '" +
                  std::string(role->get_string()) + "'",
              param + ".role");
    }
    Message entry{role_text, {}, {}, {}};
    if (role_text == "assistant") {
      if (const json::value* calls = message.get("tool_calls"))
        entry.tool_calls = parse_message_tool_calls(*calls, param + ".tool_calls");
    }
    if (role_text == "tool") {
      entry.tool_call_id = message.string("tool_call_id", "");
      if (entry.tool_call_id.empty())
        invalid("'" + param + ".tool_call_id' is required for a tool message",
                param + ".tool_call_id");
    }
    const json::value* content = message.get("content");
    if (!content && entry.tool_calls.empty())
      invalid("'" + param + ".content' is required", param + ".content");
    if (content) entry.content = content_of(*content, index);
    // A participant's label, and what a replayed assistant message carries that says nothing to
    // the model: accepted, changing nothing (docs/http-api.md, "Accepted and ignored").
    message.refuse_unread({"name", "refusal", "annotations", "reasoning_content"});
    parsed.push_back(std::move(entry));
    ++index;
  }
  return parsed;
}

std::string parse_prompt(const Fields& fields) {
  const json::value* prompt = fields.get("prompt");
  if (!prompt) invalid("'prompt' is required", "prompt");
  std::string text;
  if (prompt->is_string()) {
    text = std::string(prompt->get_string());
  } else if (prompt->is_array() && prompt->get_array().size() == 1 &&
             prompt->get_array()[0].is_string()) {
    text = std::string(prompt->get_array()[0].get_string());
  } else {
    invalid("'prompt' must be a string (or an array holding one string)", "prompt");
  }
  if (text.empty()) invalid("'prompt' must not be empty", "prompt");
  return text;
}

std::vector<std::string> parse_stop(const Fields& fields) {
  std::vector<std::string> stops;
  const json::value* stop = fields.get("stop");
  if (!stop) return stops;
  if (stop->is_string()) {
    stops.push_back(std::string(stop->get_string()));
  } else if (stop->is_array()) {
    if (stop->get_array().size() > 4) invalid("'stop' may hold at most 4 strings", "stop");
    for (const auto& item : stop->get_array()) {
      if (!item.is_string()) invalid("'stop' must be a string or an array of strings", "stop");
      stops.push_back(std::string(item.get_string()));
    }
  } else {
    invalid(std::string("'stop' must be a string or an array of strings, got ") + kind_of(*stop),
            "stop");
  }
  return stops;
}

// Chat takes `logprobs: true` and `top_logprobs`; completions take `logprobs: N` alternatives.
void parse_logprobs(const Fields& fields, RequestKind kind, GenerationParams& params) {
  if (kind == RequestKind::chat) {
    params.logprobs = fields.boolean("logprobs", false);
    params.top_logprobs = static_cast<int>(fields.integer("top_logprobs", 0, 0, 20));
    if (params.top_logprobs > 0 && !params.logprobs)
      invalid("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    return;
  }
  if (const json::value* logprobs = fields.get("logprobs")) {
    if (!logprobs->is_int64() && !logprobs->is_uint64())
      invalid("'logprobs' must be an integer for completions", "logprobs");
    params.top_logprobs = static_cast<int>(fields.integer("logprobs", 0, 0, 5));
    params.logprobs = true;
  }
  if (fields.boolean("echo", false)) invalid("'echo' is not supported", "echo");
}

// A JSON Schema given as an object (or true/false) checked by the compiler that will enforce it.
std::string schema_text(const json::value& schema, const std::string& param) {
  if (!schema.is_object() && !schema.is_bool())
    invalid("'" + param + "' must be a JSON Schema object, got " + kind_of(schema), param);
  check_json_schema(schema, param);
  return json::serialize(schema);
}

// OpenAI's tools: [{"type": "function", "function": {"name", "description", "parameters",
// "strict"}}], tool_choice and parallel_tool_calls.
void parse_tools(const Fields& fields, GenerationParams& params) {
  const json::value* tools = fields.get("tools");
  if (tools) {
    if (!tools->is_array())
      invalid(std::string("'tools' must be an array, got ") + kind_of(*tools), "tools");
    if (tools->get_array().size() > 128) invalid("'tools' may hold at most 128 tools", "tools");
    size_t index = 0;
    for (const auto& item : tools->get_array()) {
      std::string param = "tools[" + std::to_string(index++) + "]";
      if (!item.is_object()) invalid("'" + param + "' must be an object", param);
      Fields tool(item.get_object(), param + ".");
      if (tool.string("type", "") != "function")
        invalid("'" + param + ".type' must be \"function\"", param + ".type");
      const json::value* function = tool.get("function");
      if (!function || !function->is_object())
        invalid("'" + param + ".function' is required and must be an object", param + ".function");
      tool.refuse_unread({});
      Fields function_fields(function->get_object(), param + ".function.");
      ToolDefinition definition;
      definition.name = function_fields.string("name", "");
      if (!valid_function_name(definition.name)) {
        invalid(
            "'" + param + ".function.name' must be 1 to 64 letters, digits, underscores or dashes",
            param + ".function.name");
      }
      for (const auto& other : params.tools) {
        if (other.name == definition.name)
          invalid("two tools are named '" + definition.name + "'", param + ".function.name");
      }
      definition.description = function_fields.string("description", "");
      if (const json::value* parameters = function_fields.get("parameters"))
        definition.parameters = schema_text(*parameters, param + ".function.parameters");
      definition.strict = function_fields.boolean("strict", false);
      function_fields.refuse_unread({});
      params.tools.push_back(std::move(definition));
    }
  }
  params.tool_choice = params.tools.empty() ? ToolChoice::none : ToolChoice::automatic;
  if (const json::value* choice = fields.get("tool_choice")) {
    if (params.tools.empty())
      invalid("'tool_choice' is only allowed when 'tools' are given", "tool_choice");
    if (choice->is_string()) {
      std::string_view mode = choice->get_string();
      if (mode == "none") {
        params.tool_choice = ToolChoice::none;
      } else if (mode == "auto") {
        params.tool_choice = ToolChoice::automatic;
      } else if (mode == "required") {
        params.tool_choice = ToolChoice::required;
      } else {
        invalid(
            "'tool_choice' must be none, auto, required or {\"type\": \"function\", ...}, "
            "got '" +
                std::string(mode) + "'",
            "tool_choice");
      }
    } else if (choice->is_object()) {
      Fields named(choice->get_object(), "tool_choice.");
      const json::value* function = named.get("function");
      if (named.string("type", "") != "function" || !function || !function->is_object())
        invalid("'tool_choice' must be {\"type\": \"function\", \"function\": {\"name\"}}",
                "tool_choice");
      named.refuse_unread({});
      Fields function_fields(function->get_object(), "tool_choice.function.");
      std::string name = function_fields.string("name", "");
      function_fields.refuse_unread({});
      bool offered = std::any_of(params.tools.begin(), params.tools.end(),
                                 [&](const ToolDefinition& tool) { return tool.name == name; });
      if (!offered)
        invalid("'tool_choice' names '" + name + "', which is not one of 'tools'", "tool_choice");
      params.tool_choice = ToolChoice::function;
      params.tool_choice_function = name;
    } else {
      invalid(std::string("'tool_choice' must be a string or an object, got ") + kind_of(*choice),
              "tool_choice");
    }
  }
  params.parallel_tool_calls = fields.boolean("parallel_tool_calls", true);
}

// response_format: {"type": "text" | "json_object" | "json_schema", "json_schema": {"name",
// "schema", "strict", "description"}}.
ResponseFormat parse_response_format(const Fields& fields) {
  ResponseFormat format;
  const json::value* value = fields.get("response_format");
  if (!value) return format;
  if (!value->is_object())
    invalid(std::string("'response_format' must be an object, got ") + kind_of(*value),
            "response_format");
  Fields format_fields(value->get_object(), "response_format.");
  std::string type = format_fields.string("type", "");
  if (type == "text") {
    format.kind = ResponseFormat::Kind::text;
  } else if (type == "json_object") {
    format.kind = ResponseFormat::Kind::json_object;
  } else if (type == "json_schema") {
    format.kind = ResponseFormat::Kind::json_schema;
    const json::value* schema = format_fields.get("json_schema");
    if (!schema || !schema->is_object())
      invalid("'response_format.json_schema' is required and must be an object",
              "response_format.json_schema");
    Fields schema_fields(schema->get_object(), "response_format.json_schema.");
    format.name = schema_fields.string("name", "");
    if (format.name.empty())
      invalid("'response_format.json_schema.name' is required", "response_format.json_schema.name");
    const json::value* body = schema_fields.get("schema");
    format.schema = body ? schema_text(*body, "response_format.json_schema.schema") : "{}";
    format.strict = schema_fields.boolean("strict", false);
    schema_fields.refuse_unread({"description"});
  } else {
    invalid("'response_format.type' must be text, json_object or json_schema, got '" + type + "'",
            "response_format.type");
  }
  format_fields.refuse_unread({});
  return format;
}

// max_tokens of a /v1/completions request that does not give it.
constexpr int64_t kCompletionMaxTokensDefault = 16;

GenerationParams parse_generation_params(const Fields& fields, RequestKind kind) {
  GenerationParams params;
  // Absent (or null): a chat's answer may fill the context (0, GenerationParams::max_tokens); a
  // legacy completion gets 16 tokens, as OpenAI's Completions API and vLLM's give it.
  int64_t absent = kind == RequestKind::completion ? kCompletionMaxTokensDefault : 0;
  int64_t max_tokens = fields.integer("max_tokens", absent, 1, 1 << 20);
  params.max_tokens = fields.integer("max_completion_tokens", max_tokens, 1, 1 << 20);
  params.temperature = static_cast<float>(fields.number("temperature", 1.0, 0.0, 2.0));
  params.top_p = static_cast<float>(fields.number("top_p", 1.0, 0.0, 1.0));
  if (params.top_p == 0.0f) invalid("'top_p' must be greater than 0", "top_p");
  params.top_k = static_cast<int>(fields.integer("top_k", 0, -1, 1 << 20));
  if (params.top_k < 0) params.top_k = 0;  // -1 means "off", as in vLLM
  params.min_p = static_cast<float>(fields.number("min_p", 0.0, 0.0, 1.0));
  params.presence_penalty = static_cast<float>(fields.number("presence_penalty", 0.0, -2.0, 2.0));
  params.frequency_penalty = static_cast<float>(fields.number("frequency_penalty", 0.0, -2.0, 2.0));
  params.repetition_penalty =
      static_cast<float>(fields.number("repetition_penalty", 1.0, 0.01, 10.0));
  if (const json::value* seed = fields.get("seed")) {
    if (!seed->is_int64() && !seed->is_uint64())
      invalid(std::string("'seed' must be an integer, got ") + kind_of(*seed), "seed");
    params.seed = seed->is_int64() ? static_cast<uint64_t>(seed->get_int64()) : seed->get_uint64();
  }
  params.stop = parse_stop(fields);
  parse_logprobs(fields, kind, params);
  if (fields.integer("n", 1, 1, 128) != 1)
    invalid("'n' greater than 1 is not supported; send separate requests", "n");
  params.ignore_eos = fields.boolean("ignore_eos", false);
  if (kind == RequestKind::chat) {
    parse_tools(fields, params);
    params.response_format = parse_response_format(fields);
  }
  return params;
}

}  // namespace

void parse_completion_request(std::string_view body, RequestKind kind, Request& request,
                              const std::vector<std::string>& served_models) {
  json::value document = parse_object(body);
  Fields fields(document.get_object());
  request.kind = kind;
  request.model = parse_model(fields, served_models);
  if (kind == RequestKind::chat) {
    request.messages = parse_messages(fields);
    if (const json::value* kwargs = fields.get("chat_template_kwargs")) {
      if (!kwargs->is_object()) {
        invalid(std::string("'chat_template_kwargs' must be an object, got ") + kind_of(*kwargs),
                "chat_template_kwargs");
      }
      request.chat_template_kwargs = json::serialize(*kwargs);
    }
  } else {
    request.prompt = parse_prompt(fields);
  }
  request.generation = parse_generation_params(fields, kind);
  request.stream = fields.boolean("stream", false);
  if (const json::value* options = fields.get("stream_options")) {
    if (!request.stream)
      invalid("'stream_options' is only allowed when 'stream' is true", "stream_options");
    if (!options->is_object()) invalid("'stream_options' must be an object", "stream_options");
    request.include_usage =
        Fields(options->get_object(), "stream_options.").boolean("include_usage", false);
  }
  request.session_id = fields.string("session_id", "");
  check_session_id(request.session_id, "session_id");
  if (auto parent = fields.optional_integer("parent_turn", 0, INT64_MAX)) {
    if (request.session_id.empty())
      invalid("'parent_turn' names a turn of a session: it needs 'session_id'", "parent_turn");
    request.attach(std::string(kParentTurnAttachment), std::make_shared<int64_t>(*parent));
  }
  // A client-chosen label: an identity only ever comes from the credential.
  request.end_user = fields.string("user", "");
  // OpenAI fields that change nothing here (storage for OpenAI's own products, tags, tiers).
  fields.refuse_unread({"store", "metadata", "service_tier"});
}

std::string error_json(const RequestError& error) {
  json::object body{
      {"message", error.message},
      {"type", error.type},
      {"param", error.param.empty() ? json::value(nullptr) : json::value(error.param)},
      {"code", error.code.empty() ? json::value(nullptr) : json::value(error.code)}};
  return json::serialize(json::object{{"error", body}});
}

std::string stream_error_events(const RequestError& error) {
  return "data: " + error_json(error) + "\n\ndata: [DONE]\n\n";
}

namespace {

json::array bytes_of(const std::string& text) {
  json::array bytes;
  for (unsigned char c : text)
    bytes.push_back(c);
  return bytes;
}

// JSON has no -Infinity: a log-probability too small to write is OpenAI's -9999.
double writable_logprob(float logprob) {
  return std::isfinite(logprob) ? logprob : -9999.0;
}

json::value chat_logprobs(const std::vector<TokenLogprob>& logprobs) {
  if (logprobs.empty()) return nullptr;
  json::array content;
  for (const auto& token : logprobs) {
    json::array top;
    for (const auto& alternative : token.top) {
      top.push_back({{"token", text::repair(alternative.text)},
                     {"logprob", writable_logprob(alternative.logprob)},
                     {"bytes", bytes_of(alternative.text)}});
    }
    content.push_back({{"token", text::repair(token.text)},
                       {"logprob", writable_logprob(token.logprob)},
                       {"bytes", bytes_of(token.text)},
                       {"top_logprobs", top}});
  }
  return json::object{{"content", content}};
}

json::value completion_logprobs(const std::vector<TokenLogprob>& logprobs) {
  if (logprobs.empty()) return nullptr;
  json::array tokens, token_logprobs, top_logprobs;
  for (const auto& token : logprobs) {
    tokens.push_back(json::string(text::repair(token.text)));
    token_logprobs.push_back(writable_logprob(token.logprob));
    json::object top;
    for (const auto& alternative : token.top)
      top[text::repair(alternative.text)] = writable_logprob(alternative.logprob);
    top_logprobs.push_back(top);
  }
  return json::object{
      {"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top_logprobs}};
}

json::object usage_json(const Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", usage.cached_prompt_tokens}}}};
}

json::array tool_calls_json(const std::vector<ToolCall>& calls) {
  json::array list;
  for (const auto& call : calls) {
    list.push_back(json::object{
        {"id", call.id},
        {"type", "function"},
        {"function", json::object{{"name", call.name}, {"arguments", call.arguments}}}});
  }
  return list;
}

// OpenAI's streamed calls: the first piece of each has its id, type and name.
json::array tool_call_deltas_json(const std::vector<chat::ToolCallDelta>& deltas) {
  json::array list;
  for (const auto& delta : deltas) {
    json::object function{{"arguments", delta.arguments}};
    json::object entry{{"index", delta.index}};
    if (!delta.id.empty()) {
      entry["id"] = delta.id;
      entry["type"] = "function";
      function["name"] = delta.name;
    }
    entry["function"] = std::move(function);
    list.push_back(std::move(entry));
  }
  return list;
}

std::string event(const json::value& value) {
  return "data: " + json::serialize(value) + "\n\n";
}

}  // namespace

// An agent's trace: each tool call and what became of it, then why the loop ended.
static json::array agent_steps_json(const std::vector<AgentStep>& steps) {
  json::array entries;
  for (const AgentStep& step : steps) {
    json::object entry{{"step", step.step}, {"status", step.status}};
    if (step.tool.empty()) {
      entry["prompt_tokens"] = step.usage.prompt_tokens;
      entry["completion_tokens"] = step.usage.completion_tokens;
    } else {
      entry["tool"] = step.tool;
      entry["call_id"] = step.call_id;
      entry["arguments"] = step.arguments;
      entry["attempts"] = step.attempts;
      json::array flags;
      for (const auto& flag : step.flags)
        flags.push_back(json::string(flag));
      entry["flags"] = std::move(flags);
    }
    entry["detail"] = text::repair(step.detail);
    entry["duration_ms"] = step.duration_ms;
    entries.push_back(std::move(entry));
  }
  return entries;
}

// chatflow's own response field: the documents the answer may cite as [n], and an agent's steps.
static json::object chatflow_extension(const Request& request) {
  json::array citations;
  for (size_t i = 0; i < request.citations.size(); ++i) {
    const ContextPassage& passage = request.citations[i];
    citations.push_back(json::object{{"index", i + 1},
                                     {"document", passage.document},
                                     {"title", passage.title},
                                     {"chunk", passage.chunk},
                                     {"text", text::repair(passage.text)}});
  }
  json::object extension;
  if (!citations.empty()) extension["citations"] = std::move(citations);
  if (!request.agent_steps.empty()) extension["steps"] = agent_steps_json(request.agent_steps);
  return extension;
}

std::string SseEncoder::encode(const Request& request, const Chunk& chunk) {
  bool is_chat = request.kind == RequestKind::chat;
  auto envelope = [&](json::array choices) {
    json::object object{{"id", request.id},
                        {"object", is_chat ? "chat.completion.chunk" : "text_completion"},
                        {"created", request.created},
                        {"model", request.model},
                        {"choices", std::move(choices)}};
    if (request.include_usage) object["usage"] = nullptr;
    if (!citations_sent_ && (!request.citations.empty() || !request.agent_steps.empty())) {
      object["chatflow"] = chatflow_extension(request);
      citations_sent_ = true;
    }
    return object;
  };
  chat::AnswerPiece piece = answer_.push(request, chunk);
  auto choice = [&](const std::string& text, const std::vector<TokenLogprob>& logprobs,
                    bool with_role, std::optional<chat::StopReason> stop,
                    const std::string& reasoning = {},
                    const std::vector<chat::ToolCallDelta>& calls = {}) {
    json::value finish_value = nullptr;
    if (stop) finish_value = std::string(chat::to_string(*stop));
    if (!is_chat) {
      return json::object{{"text", text},
                          {"index", 0},
                          {"logprobs", completion_logprobs(logprobs)},
                          {"finish_reason", finish_value}};
    }
    json::object delta;
    if (with_role) delta["role"] = "assistant";
    if (!reasoning.empty()) delta["reasoning_content"] = reasoning;
    if (with_role || !text.empty()) delta["content"] = text;
    if (!calls.empty()) delta["tool_calls"] = tool_call_deltas_json(calls);
    return json::object{{"index", 0},
                        {"delta", delta},
                        {"logprobs", chat_logprobs(logprobs)},
                        {"finish_reason", finish_value}};
  };
  const std::string& text = piece.text;
  const std::string& reasoning = piece.reasoning;
  const std::vector<chat::ToolCallDelta>& calls = piece.calls;
  std::string encoded;
  if (is_chat && !role_sent_) {
    encoded += event(envelope({choice("", {}, true, std::nullopt)}));
    role_sent_ = true;
  }
  if (!text.empty() || !reasoning.empty() || !chunk.logprobs.empty() || !calls.empty()) {
    encoded +=
        event(envelope({choice(text, chunk.logprobs, false, std::nullopt, reasoning, calls)}));
  }
  if (chunk.is_final()) {
    json::object last = envelope({choice("", {}, false, piece.stop)});
    if (auto reason = request.annotation(kRetractAnnotation)) {
      json::value& extension = last["chatflow"];
      if (!extension.is_object()) extension = json::object{};
      extension.as_object()["retract"] = json::object{{"reason", *reason}};
    }
    encoded += event(last);
    if (request.include_usage) {
      json::object usage_chunk = envelope({});
      usage_chunk["usage"] = usage_json(chunk.usage ? *chunk.usage : request.usage);
      encoded += event(usage_chunk);
    }
    encoded += "data: [DONE]\n\n";
  }
  return encoded;
}

void WholeAnswer::add(const Chunk& chunk) {
  text += chunk.text;
  reasoning += chunk.reasoning;
  tool_calls.insert(tool_calls.end(), chunk.tool_calls.begin(), chunk.tool_calls.end());
  logprobs.insert(logprobs.end(), chunk.logprobs.begin(), chunk.logprobs.end());
}

std::string completion_json(const Request& request, const WholeAnswer& answer) {
  bool chat = request.kind == RequestKind::chat;
  std::string finish =
      request.finish_reason() ? std::string(to_string(*request.finish_reason())) : "stop";
  json::value logprobs_value =
      chat ? chat_logprobs(answer.logprobs) : completion_logprobs(answer.logprobs);
  json::object choice;
  if (chat) {
    // The whole answer read as its stream is: the same content, calls and stop reason.
    Chunk whole;
    whole.text = answer.text;
    whole.reasoning = answer.reasoning;
    whole.tool_calls = answer.tool_calls;
    whole.finish = request.finish_reason().value_or(FinishReason::stop);
    chat::AnswerStream stream;
    chat::GatheredAnswer gathered;
    gathered.add(stream.push(request, whole));
    std::string& content = gathered.text;
    std::vector<ToolCall>& calls = gathered.calls;
    finish = std::string(chat::to_string(gathered.stop));
    json::object message{{"role", "assistant"}, {"content", content}};
    // A reasoning model's answer always says what it reasoned, null for nothing.
    if (!gathered.reasoning.empty() || request.reasoning.enabled) {
      message["reasoning_content"] =
          gathered.reasoning.empty() ? json::value(nullptr) : json::value(gathered.reasoning);
    }
    if (!calls.empty()) {
      if (content.empty()) message["content"] = nullptr;
      message["tool_calls"] = tool_calls_json(calls);
    }
    choice = {{"index", 0},
              {"message", std::move(message)},
              {"logprobs", logprobs_value},
              {"finish_reason", finish}};
  } else {
    choice = {{"index", 0},
              {"text", text::repair(answer.text)},
              {"logprobs", logprobs_value},
              {"finish_reason", finish}};
  }
  json::object response{{"id", request.id},
                        {"object", chat ? "chat.completion" : "text_completion"},
                        {"created", request.created},
                        {"model", request.model},
                        {"choices", json::array{choice}},
                        {"usage", usage_json(request.usage)}};
  if (!request.citations.empty() || !request.agent_steps.empty())
    response["chatflow"] = chatflow_extension(request);
  return json::serialize(response);
}

}  // namespace chatflow::openai
