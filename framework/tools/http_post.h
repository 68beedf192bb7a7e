// An HTTP(S) client for calling tool endpoints, moderation services and trace collectors: one
// POST with a deadline that covers the whole exchange (resolve, connect, TLS handshake, write,
// read), bounds on the answer's size (its header and trailer as well as its body), and a way to
// give up when the request it serves is cancelled. Synchronous on purpose: the caller (an agent
// loop, an exporter's thread) has nothing else to do meanwhile. https endpoints are verified
// (chain and host name, TLS 1.2+); a TLS failure is a failed call, never a plaintext retry.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "framework/net/tls_client.h"

namespace chatflow::tools {

struct HttpEndpoint {
  std::string host;
  std::string port = "80";
  std::string target = "/";  // path and query
  bool tls = false;          // https://
};

// "http://host[:port][/path]" or "https://..." (port 443 unless given); nullopt with `error` set
// for anything else (another scheme, user info, a missing host, a bad port), naming what is
// wrong.
std::optional<HttpEndpoint> parse_http_url(std::string_view url, std::string& error);

struct HttpOutcome {
  enum class Kind { response, connect_failed, timed_out, cancelled, failed };
  Kind kind = Kind::failed;
  int status = 0;     // response: the HTTP status
  std::string body;   // response: at most max_body_bytes (longer answers are `failed`)
  std::string error;  // otherwise: what happened, for the step's detail
  // response: the answer's header fields as sent (an MCP server's Content-Type, Mcp-Session-Id).
  std::vector<std::pair<std::string, std::string>> headers;
};

struct HttpPost {
  const HttpEndpoint* endpoint = nullptr;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // besides Host, Content-Length
  std::chrono::steady_clock::time_point deadline;
  size_t max_body_bytes = 1 << 20;
  std::function<bool()> cancelled;  // polled while waiting; may be empty
  // For an https endpoint: whom to trust (a ca_file); null: the system's trust store.
  const net::TlsClientContext* tls = nullptr;
  // "POST" or "GET" (an identity provider's key set); a GET sends no body.
  std::string method = "POST";
};

HttpOutcome post(const HttpPost& request);

}  // namespace chatflow::tools
