// How an MCP client reaches its server (mcp_client.h): a child process spoken to over its stdin
// and stdout (one JSON-RPC message per line, its stderr kept for error messages), or a
// Streamable HTTP endpoint (each message POSTed, the answer as JSON or as server-sent events).
// A transport moves messages; the client runs the protocol's lifecycle over it.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "framework/tools/http_post.h"
#include "framework/tools/json_rpc.h"

namespace chatflow::tools {

struct McpFailure {
  enum class Kind {
    timeout,          // no answer before the deadline
    closed,           // the process exited, or the connection failed
    malformed,        // the server wrote something that is not JSON-RPC
    failed,           // anything else (an HTTP error status, a spawn failure)
    cancelled,        // the request it serves was cancelled
    session_expired,  // HTTP 404 for our Mcp-Session-Id: initialise again
  };
  Kind kind = Kind::failed;
  std::string message;  // what happened, without the server's name
};

// The answer to one request, or why there is none.
struct McpExchange {
  std::optional<jsonrpc::Message> response;
  std::optional<McpFailure> failure;
};

struct McpSendOptions {
  std::chrono::steady_clock::time_point deadline;
  std::function<bool()> cancelled;  // may be empty
};

class McpTransport {
 public:
  // Called with each notification the server sends while the transport waits for an answer.
  using NotificationHandler = std::function<void(const jsonrpc::Message&)>;

  virtual ~McpTransport() = default;

  // Writes `message` and, when `id` is set, waits for the response with that id. Requests the
  // server makes meanwhile are answered here (ping with an empty result, anything else with
  // "method not found": this client offers no capabilities to servers); responses to older,
  // abandoned requests are dropped.
  virtual McpExchange send(const std::string& message, std::optional<int64_t> id,
                           const McpSendOptions& options) = 0;

  // False once the transport cannot carry another message (the process exited, its output
  // could not be read as JSON-RPC): the client starts a new one.
  virtual bool usable() const = 0;

  // The protocol version agreed in initialize (HTTP sends it as MCP-Protocol-Version).
  virtual void set_protocol_version(const std::string& version) { (void)version; }

  void on_notification(NotificationHandler handler) { notification_handler_ = std::move(handler); }

 protected:
  NotificationHandler notification_handler_;
};

struct McpStdioOptions {
  std::string command;  // found on PATH when it has no '/'
  std::vector<std::string> args;
  // Set in the child's environment besides PATH, HOME, LANG, LC_ALL, TMPDIR, USER, LOGNAME,
  // SHELL and TERM (the rest of the server's environment, its secrets included, is not passed).
  std::map<std::string, std::string> env;
  std::string working_directory;  // empty: the server's own
  size_t max_message_bytes = 4 << 20;
};

// Starts the process; a command that cannot be run is a `failed` McpFailure, never a throw.
std::unique_ptr<McpTransport> start_stdio_transport(const McpStdioOptions& options,
                                                    std::optional<McpFailure>& failure);

struct McpHttpOptions {
  HttpEndpoint endpoint;
  std::vector<std::pair<std::string, std::string>> headers;  // sent with every message
  std::shared_ptr<const net::TlsClientContext> tls;          // https: whom to trust; null: system
  size_t max_message_bytes = 4 << 20;
};

std::unique_ptr<McpTransport> make_http_transport(McpHttpOptions options);

}  // namespace chatflow::tools
