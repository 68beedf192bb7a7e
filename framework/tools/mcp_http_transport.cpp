// MCP's Streamable HTTP transport: each message is POSTed to the server's one endpoint; a
// request's answer comes back as application/json or as a text/event-stream whose events carry
// the response (and, before it, the server's own notifications and requests). The session id
// the server gives in initialize's answer (Mcp-Session-Id) goes with every later message; a 404
// for it means the session is gone, and the client initialises again.
#include <algorithm>
#include <cctype>

#include "framework/tools/mcp_transport.h"

namespace chatflow::tools {
namespace {
namespace json = boost::json;

bool same_name(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string header(const HttpOutcome& answer, std::string_view name) {
  for (const auto& [field, value] : answer.headers)
    if (same_name(field, name)) return value;
  return {};
}

class HttpTransport final : public McpTransport {
 public:
  explicit HttpTransport(McpHttpOptions options) : options_(std::move(options)) {}

  McpExchange send(const std::string& message, std::optional<int64_t> id,
                   const McpSendOptions& options) override {
    HttpOutcome answer = post(message, options);
    if (answer.kind != HttpOutcome::Kind::response) return {std::nullopt, failure_of(answer)};
    if (std::string session = header(answer, "Mcp-Session-Id"); !session.empty())
      session_id_ = session;
    if (answer.status == 404 && !session_id_.empty()) {
      session_id_.clear();
      return {std::nullopt, McpFailure{McpFailure::Kind::session_expired,
                                       "no longer knows this client's session (HTTP 404)"}};
    }
    if (answer.status < 200 || answer.status >= 300) {
      return {std::nullopt,
              McpFailure{
                  McpFailure::Kind::failed,
                  "answered HTTP " + std::to_string(answer.status) +
                      (answer.body.empty() ? "" : ": " + jsonrpc::quote_start(answer.body, 300))}};
    }
    if (!id) return {};
    std::string type = header(answer, "Content-Type");
    std::vector<std::string> bodies;
    if (type.rfind("text/event-stream", 0) == 0) {
      bodies = jsonrpc::event_stream_data(answer.body);
    } else if (type.rfind("application/json", 0) == 0) {
      bodies.push_back(std::move(answer.body));
    } else {
      return {std::nullopt, McpFailure{McpFailure::Kind::malformed,
                                       "answered with Content-Type '" + type +
                                           "', neither application/json nor text/event-stream"}};
    }
    for (const auto& body : bodies) {
      std::string error;
      auto messages = jsonrpc::read_messages(body, error);
      if (!messages)
        return {std::nullopt, McpFailure{McpFailure::Kind::malformed, "answered " + error}};
      for (auto& received : *messages) {
        if (received.kind == jsonrpc::Message::Kind::response) {
          if (received.id.is_int64() && received.id.as_int64() == *id)
            return {std::move(received), std::nullopt};
        } else if (received.kind == jsonrpc::Message::Kind::request) {
          answer_request(received, options);
        } else if (notification_handler_) {
          notification_handler_(received);
        }
      }
    }
    return {std::nullopt,
            McpFailure{McpFailure::Kind::malformed,
                       "answered without a response to request " + std::to_string(*id)}};
  }

  bool usable() const override { return true; }

  void set_protocol_version(const std::string& version) override { protocol_version_ = version; }

 private:
  HttpOutcome post(const std::string& message, const McpSendOptions& options) const {
    HttpPost request;
    request.endpoint = &options_.endpoint;
    request.body = message;
    request.headers = {{"Content-Type", "application/json"},
                       {"Accept", "application/json, text/event-stream"}};
    if (!protocol_version_.empty())
      request.headers.emplace_back("MCP-Protocol-Version", protocol_version_);
    if (!session_id_.empty()) request.headers.emplace_back("Mcp-Session-Id", session_id_);
    for (const auto& field : options_.headers)
      request.headers.push_back(field);
    request.deadline = options.deadline;
    request.max_body_bytes = options_.max_message_bytes;
    request.cancelled = options.cancelled;
    request.tls = options_.tls.get();
    return tools::post(request);
  }

  // A request the server made inside its answer is answered with a POST of our own.
  void answer_request(const jsonrpc::Message& received, const McpSendOptions& options) {
    std::string reply =
        received.method == "ping"
            ? jsonrpc::response(received.id, json::object{})
            : jsonrpc::error_response(received.id, -32601, "method not found: " + received.method);
    post(reply, options);
  }

  static McpFailure failure_of(const HttpOutcome& answer) {
    using Kind = HttpOutcome::Kind;
    switch (answer.kind) {
      case Kind::timed_out:
        return {McpFailure::Kind::timeout, "gave no answer before the deadline"};
      case Kind::cancelled:
        return {McpFailure::Kind::cancelled, "the request was cancelled"};
      case Kind::connect_failed:
        return {McpFailure::Kind::closed, "cannot be reached: " + answer.error};
      default:
        return {McpFailure::Kind::failed, answer.error};
    }
  }

  McpHttpOptions options_;
  std::string session_id_;
  std::string protocol_version_;
};

}  // namespace

std::unique_ptr<McpTransport> make_http_transport(McpHttpOptions options) {
  return std::make_unique<HttpTransport>(std::move(options));
}

}  // namespace chatflow::tools
