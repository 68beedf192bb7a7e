#include "framework/tools/mcp_client.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace chatflow::tools {
namespace json = boost::json;
using Clock = std::chrono::steady_clock;

const char* const kMcpProtocolVersions[3] = {"2025-06-18", "2025-03-26", "2024-11-05"};

namespace {

constexpr int kMaxToolPages = 100;  // a server whose cursors never end is not followed for ever

std::string seconds_text(Clock::duration duration) {
  double seconds = std::chrono::duration<double>(duration).count();
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", seconds);
  return text;
}

const json::string* string_member(const json::object& object, std::string_view key) {
  const json::value* value = object.if_contains(key);
  return value != nullptr && value->is_string() ? &value->as_string() : nullptr;
}

}  // namespace

McpClient::McpClient(McpServerSpec spec) : spec_(std::move(spec)) {}

McpClient::~McpClient() = default;

McpClient::Answer McpClient::failed(const McpFailure& failure, const std::string& doing) {
  Answer answer;
  answer.status = failure.kind == McpFailure::Kind::timeout     ? "timeout"
                  : failure.kind == McpFailure::Kind::cancelled ? "cancelled"
                                                                : "error";
  answer.error = "MCP server '" + spec_.name + "' " + failure.message + " (" + doing + ")";
  answer.transport_failure = true;
  return answer;
}

// A failed start, or a server found dead: its next start waits 0 s after the first failure in
// a row, then 0.5 s, doubling up to 30 s.
void McpClient::note_failure(const std::string& error) {
  ++failures_in_a_row_;
  double pause =
      failures_in_a_row_ <= 1 ? 0.0 : std::min(30.0, 0.5 * std::pow(2.0, failures_in_a_row_ - 2));
  next_start_ = Clock::now() +
                std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(pause));
  last_failure_ = error;
}

std::optional<McpClient::Answer> McpClient::ready(const McpCallOptions& options) {
  if (transport_ && !transport_->usable()) {
    transport_.reset();
    initialized_ = false;
  }
  if (transport_ && initialized_) return std::nullopt;
  return start(options);
}

std::optional<McpClient::Answer> McpClient::start(const McpCallOptions& options) {
  auto now = Clock::now();
  if (now < next_start_) {
    Answer answer;
    answer.status = "error";
    answer.error = "MCP server '" + spec_.name + "' is not started again for another " +
                   seconds_text(next_start_ - now) + " (" + std::to_string(failures_in_a_row_) +
                   " failures in a row); the last: " + last_failure_;
    answer.transport_failure = true;
    return answer;
  }
  transport_.reset();
  initialized_ = false;
  tools_.reset();
  if (spec_.stdio) {
    std::optional<McpFailure> failure;
    transport_ = start_stdio_transport(*spec_.stdio, failure);
    if (failure) {
      Answer answer = failed(*failure, "starting");
      note_failure(answer.error);
      return answer;
    }
  } else {
    transport_ = make_http_transport(*spec_.http);
  }
  transport_->on_notification([this](const jsonrpc::Message& message) {
    if (message.method == "notifications/tools/list_changed") tools_changed_ = true;
  });
  McpCallOptions starting = options;
  starting.deadline = std::min(options.deadline, now + spec_.startup_timeout);
  json::object params{{"protocolVersion", kMcpProtocolVersions[0]},
                      {"capabilities", json::object{}},
                      {"clientInfo", json::object{{"name", "chatflow"}, {"version", "1"}}}};
  McpExchange answer = transport_->send(jsonrpc::request(next_id_, "initialize", params), next_id_,
                                        {starting.deadline, starting.cancelled});
  ++next_id_;
  auto give_up = [&](Answer failure) {
    transport_.reset();
    if (failure.status != "cancelled") note_failure(failure.error);
    return failure;
  };
  if (answer.failure) return give_up(failed(*answer.failure, "initialize"));
  const jsonrpc::Message& response = *answer.response;
  Answer refused;
  refused.status = "error";
  refused.transport_failure = true;
  if (response.failed) {
    refused.error = "MCP server '" + spec_.name +
                    "' refused initialize: " + response.error_message + " (code " +
                    std::to_string(response.error_code) + ")";
    return give_up(refused);
  }
  const json::string* version = response.result.is_object()
                                    ? string_member(response.result.as_object(), "protocolVersion")
                                    : nullptr;
  bool spoken = version != nullptr &&
                std::any_of(std::begin(kMcpProtocolVersions), std::end(kMcpProtocolVersions),
                            [&](const char* known) { return *version == known; });
  if (!spoken) {
    refused.error = "MCP server '" + spec_.name + "' answered initialize with protocol version " +
                    (version ? "'" + std::string(*version) + "'" : std::string("none")) +
                    "; chatflow speaks 2025-06-18, 2025-03-26 and 2024-11-05";
    return give_up(refused);
  }
  protocol_version_ = std::string(*version);
  transport_->set_protocol_version(protocol_version_);
  McpExchange sent = transport_->send(jsonrpc::notification("notifications/initialized", {}),
                                      std::nullopt, {starting.deadline, starting.cancelled});
  if (sent.failure) return give_up(failed(*sent.failure, "notifications/initialized"));
  initialized_ = true;
  return std::nullopt;
}

McpClient::Answer McpClient::exchange(const std::string& method, json::object params,
                                      const McpCallOptions& options) {
  for (int attempt = 0;; ++attempt) {
    int64_t id = next_id_++;
    McpExchange answer = transport_->send(jsonrpc::request(id, method, params), id,
                                          {options.deadline, options.cancelled});
    if (answer.failure) {
      McpFailure failure = *answer.failure;
      if (failure.kind == McpFailure::Kind::session_expired && attempt == 0) {
        initialized_ = false;
        if (auto not_ready = ready(options)) return *not_ready;
        continue;
      }
      if (failure.kind == McpFailure::Kind::timeout && transport_->usable()) {
        // The server may still be working on it: tell it to stop (the late answer is dropped).
        json::object cancel{{"requestId", id}, {"reason", "timed out"}};
        transport_->send(jsonrpc::notification("notifications/cancelled", std::move(cancel)),
                         std::nullopt, {Clock::now() + std::chrono::milliseconds(500), {}});
      }
      Answer result = failed(failure, method);
      if (!transport_->usable()) note_failure(result.error);
      return result;
    }
    failures_in_a_row_ = 0;
    const jsonrpc::Message& response = *answer.response;
    if (response.failed) {
      Answer refused;
      refused.status = "error";
      refused.error = "MCP server '" + spec_.name + "' refused " + method + ": " +
                      response.error_message + " (code " + std::to_string(response.error_code) +
                      ")";
      return refused;
    }
    if (!response.result.is_object()) {
      Answer odd;
      odd.status = "error";
      odd.error = "MCP server '" + spec_.name + "' answered " + method + " with a result that is " +
                  "not an object: " + jsonrpc::quote_start(json::serialize(response.result));
      return odd;
    }
    Answer result;
    result.result = response.result;
    return result;
  }
}

McpClient::Answer McpClient::list_all(const McpCallOptions& options) {
  auto tools = std::make_shared<std::vector<McpTool>>();
  std::set<std::string> cursors;
  std::string cursor;
  for (int page = 0; page < kMaxToolPages; ++page) {
    json::object params;
    if (!cursor.empty()) params["cursor"] = cursor;
    Answer answer = exchange("tools/list", std::move(params), options);
    if (!answer.result) return answer;
    const json::object& result = answer.result->as_object();
    const json::value* listed = result.if_contains("tools");
    if (listed == nullptr || !listed->is_array()) {
      Answer odd;
      odd.status = "error";
      odd.error = "MCP server '" + spec_.name + "' answered tools/list without a \"tools\" array";
      return odd;
    }
    for (const auto& item : listed->as_array()) {
      const json::object* entry = item.if_object();
      const json::string* name = entry ? string_member(*entry, "name") : nullptr;
      if (name == nullptr) continue;  // nothing to call it by
      McpTool tool;
      tool.name = std::string(*name);
      if (const json::string* description = string_member(*entry, "description"))
        tool.description = std::string(*description);
      const json::value* schema = entry->if_contains("inputSchema");
      tool.input_schema = schema != nullptr && schema->is_object()
                              ? schema->as_object()
                              : json::object{{"type", "object"}};
      tools->push_back(std::move(tool));
    }
    const json::string* next = string_member(result, "nextCursor");
    if (next == nullptr || next->empty()) {
      Answer done;
      tools_ = std::move(tools);
      done.result = json::object{};
      return done;
    }
    cursor = std::string(*next);
    if (!cursors.insert(cursor).second) break;
  }
  Answer endless;
  endless.status = "error";
  endless.error = "MCP server '" + spec_.name + "' answered tools/list with cursors that do not " +
                  "end (a cursor repeated, or more than " + std::to_string(kMaxToolPages) +
                  " pages)";
  return endless;
}

McpToolList McpClient::tools(const McpCallOptions& options) {
  std::unique_lock lock(mutex_, std::defer_lock);
  if (!lock.try_lock_until(options.deadline)) {
    return {nullptr, "timeout",
            "MCP server '" + spec_.name + "' was busy with other calls until the deadline"};
  }
  if (auto not_ready = ready(options)) return {nullptr, not_ready->status, not_ready->error};
  if (tools_ && !tools_changed_) return {tools_, "ok", {}};
  tools_changed_ = false;
  Answer answer = list_all(options);
  if (!answer.result) return {nullptr, answer.status, answer.error};
  return {tools_, "ok", {}};
}

McpCallOutcome McpClient::call(const std::string& tool, const std::string& arguments,
                               const McpCallOptions& options) {
  json::error_code parse_error;
  json::value parsed = json::parse(arguments, parse_error);
  if (parse_error || !parsed.is_object())
    return {"error", "the arguments of '" + tool + "' are not a JSON object", false};
  std::unique_lock lock(mutex_, std::defer_lock);
  if (!lock.try_lock_until(options.deadline)) {
    return {"timeout",
            "MCP server '" + spec_.name + "' was busy with other calls until the deadline", true};
  }
  if (auto not_ready = ready(options))
    return {not_ready->status, not_ready->error, not_ready->transport_failure};
  json::object params{{"name", tool}};
  params["arguments"] = std::move(parsed);
  Answer answer = exchange("tools/call", std::move(params), options);
  if (!answer.result) return {answer.status, answer.error, answer.transport_failure};
  const json::object& result = answer.result->as_object();
  const json::value* is_error = result.if_contains("isError");
  bool tool_error = is_error != nullptr && is_error->is_bool() && is_error->as_bool();
  return {tool_error ? "error" : "ok", mcp_result_text(result), false};
}

std::string mcp_result_text(const json::object& result) {
  std::string text;
  auto add = [&text](std::string_view part) {
    if (!text.empty()) text += '\n';
    text += part;
  };
  if (const json::value* content = result.if_contains("content"); content && content->is_array()) {
    for (const auto& item : content->as_array()) {
      const json::object* part = item.if_object();
      if (part == nullptr) continue;
      const json::string* type = string_member(*part, "type");
      std::string kind = type ? std::string(*type) : "unknown";
      const json::string* mime = string_member(*part, "mimeType");
      if (kind == "text") {
        if (const json::string* value = string_member(*part, "text")) add(*value);
      } else if (kind == "resource") {
        const json::value* resource = part->if_contains("resource");
        const json::object* fields = resource ? resource->if_object() : nullptr;
        const json::string* value = fields ? string_member(*fields, "text") : nullptr;
        const json::string* uri = fields ? string_member(*fields, "uri") : nullptr;
        if (value != nullptr) {
          add(*value);
        } else {
          add("[resource " + (uri ? std::string(*uri) : std::string("?")) +
              ": not text, not shown]");
        }
      } else if (kind == "resource_link") {
        const json::string* uri = string_member(*part, "uri");
        add("[resource link: " + (uri ? std::string(*uri) : std::string("?")) + "]");
      } else {
        add("[" + kind + (mime ? " " + std::string(*mime) : std::string()) + ": not shown]");
      }
    }
  }
  if (text.empty()) {
    if (const json::value* structured = result.if_contains("structuredContent"))
      text = json::serialize(*structured);
  }
  return text;
}

}  // namespace chatflow::tools
