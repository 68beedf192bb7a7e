// A plain-HTTP client for calling tool endpoints: one POST with a deadline that covers the
// whole exchange (resolve, connect, write, read), a bound on the answer's size, and a way to
// give up when the request it serves is cancelled. Synchronous on purpose: the caller (an agent
// loop on its own thread) has nothing else to do meanwhile. No TLS: `https://` is refused when
// the URL is read, so a configuration can never believe its calls are encrypted.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace chatflow::tools {

struct HttpEndpoint {
  std::string host;
  std::string port = "80";
  std::string target = "/";  // path and query
};

// "http://host[:port][/path]"; nullopt with `error` set for anything else (https, user info, a
// missing host, a bad port), naming what is wrong.
std::optional<HttpEndpoint> parse_http_url(std::string_view url, std::string& error);

struct HttpOutcome {
  enum class Kind { response, connect_failed, timed_out, cancelled, failed };
  Kind kind = Kind::failed;
  int status = 0;     // response: the HTTP status
  std::string body;   // response: at most max_body_bytes (longer answers are `failed`)
  std::string error;  // otherwise: what happened, for the step's detail
};

struct HttpPost {
  const HttpEndpoint* endpoint = nullptr;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // besides Host, Content-Length
  std::chrono::steady_clock::time_point deadline;
  size_t max_body_bytes = 1 << 20;
  std::function<bool()> cancelled;  // polled while waiting; may be empty
};

HttpOutcome post(const HttpPost& request);

}  // namespace chatflow::tools
