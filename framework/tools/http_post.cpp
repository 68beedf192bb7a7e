#include "framework/tools/http_post.h"

#include <charconv>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

namespace chatflow::tools {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

std::optional<HttpEndpoint> parse_http_url(std::string_view url, std::string& error) {
  constexpr std::string_view kScheme = "http://";
  if (url.substr(0, 8) == "https://") {
    error = "'" + std::string(url) +
            "': https is not supported (chatflow's tool client has no TLS); use http:// to a "
            "local endpoint or a TLS-terminating proxy on loopback";
    return std::nullopt;
  }
  if (url.substr(0, kScheme.size()) != kScheme) {
    error = "'" + std::string(url) + "' is not an http:// URL";
    return std::nullopt;
  }
  std::string_view rest = url.substr(kScheme.size());
  size_t slash = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, slash);
  HttpEndpoint endpoint;
  if (slash != std::string_view::npos) {
    endpoint.target = std::string(rest.substr(slash));
    if (endpoint.target.front() == '?') endpoint.target.insert(0, "/");
  }
  if (authority.find('@') != std::string_view::npos) {
    error = "'" + std::string(url) + "': user information in the URL is not supported";
    return std::nullopt;
  }
  // A bracketed IPv6 host may hold colons of its own; the port comes after the bracket.
  size_t host_end = authority.size();
  std::string_view host = authority;
  if (!authority.empty() && authority.front() == '[') {
    size_t bracket = authority.find(']');
    if (bracket == std::string_view::npos) {
      error = "'" + std::string(url) + "': an IPv6 host needs its closing ']'";
      return std::nullopt;
    }
    host = authority.substr(1, bracket - 1);
    host_end = bracket + 1;
  } else {
    host_end = std::min(authority.find(':'), authority.size());
    host = authority.substr(0, host_end);
  }
  if (host_end < authority.size()) {
    std::string_view port = authority.substr(host_end);
    unsigned number = 0;
    auto [end, status] = port.size() < 2 || port.front() != ':'
                             ? std::from_chars_result{port.data(), std::errc::invalid_argument}
                             : std::from_chars(port.data() + 1, port.data() + port.size(), number);
    if (status != std::errc() || end != port.data() + port.size() || number == 0 ||
        number > 65535) {
      error = "'" + std::string(url) + "': the port must be a number from 1 to 65535";
      return std::nullopt;
    }
    endpoint.port = std::string(port.substr(1));
  }
  authority = host;
  if (authority.empty()) {
    error = "'" + std::string(url) + "' names no host";
    return std::nullopt;
  }
  endpoint.host = std::string(authority);
  return endpoint;
}

namespace {

// One exchange on its own io_context, run in slices so that a cancelled request is noticed
// within a slice even while the endpoint says nothing.
class Exchange {
 public:
  explicit Exchange(const HttpPost& request) : request_(request), stream_(io_), resolver_(io_) {
    parser_.body_limit(request.max_body_bytes);
  }

  HttpOutcome run() {
    const HttpEndpoint& endpoint = *request_.endpoint;
    message_.method(http::verb::post);
    message_.target(endpoint.target);
    message_.version(11);
    message_.set(http::field::host, endpoint.host);
    message_.set(http::field::user_agent, "chatflow-agent");
    message_.set(http::field::connection, "close");
    for (const auto& [name, value] : request_.headers)
      message_.set(name, value);
    message_.body() = request_.body;
    message_.prepare_payload();
    stream_.expires_at(request_.deadline);
    resolver_.async_resolve(endpoint.host, endpoint.port,
                            [this](beast::error_code error, tcp::resolver::results_type results) {
                              if (error) return finish(HttpOutcome::Kind::connect_failed, error);
                              connect(results);
                            });
    constexpr auto kSlice = std::chrono::milliseconds(20);
    while (!io_.stopped()) {
      io_.run_for(kSlice);
      if (done_) break;
      if (request_.cancelled && request_.cancelled()) {
        cancelled_ = true;
        resolver_.cancel();
        stream_.cancel();
      }
      if (std::chrono::steady_clock::now() > request_.deadline) {
        // Resolution is not covered by the stream's expiry.
        resolver_.cancel();
        stream_.cancel();
      }
    }
    return outcome_;
  }

 private:
  void connect(const tcp::resolver::results_type& results) {
    stream_.async_connect(results, [this](beast::error_code error, const tcp::endpoint&) {
      if (error) return finish(HttpOutcome::Kind::connect_failed, error);
      http::async_write(stream_, message_, [this](beast::error_code error, size_t) {
        if (error) return finish(HttpOutcome::Kind::failed, error);
        http::async_read(stream_, buffer_, parser_, [this](beast::error_code error, size_t) {
          if (error) return finish(HttpOutcome::Kind::failed, error);
          outcome_.kind = HttpOutcome::Kind::response;
          outcome_.status = static_cast<int>(parser_.get().result_int());
          outcome_.body = std::move(parser_.get().body());
          done_ = true;
        });
      });
    });
  }

  void finish(HttpOutcome::Kind kind, const beast::error_code& error) {
    done_ = true;
    bool late = std::chrono::steady_clock::now() >= request_.deadline;
    if (cancelled_) {
      outcome_.kind = HttpOutcome::Kind::cancelled;
      outcome_.error = "the request was cancelled";
    } else if (error == beast::error::timeout ||
               (late && error == asio::error::operation_aborted)) {
      outcome_.kind = HttpOutcome::Kind::timed_out;
      outcome_.error = "no answer before the deadline";
    } else if (error == http::error::body_limit) {
      outcome_.kind = HttpOutcome::Kind::failed;
      outcome_.error =
          "the answer is longer than " + std::to_string(request_.max_body_bytes) + " bytes";
    } else {
      outcome_.kind = kind;
      outcome_.error = error.message();
    }
  }

  const HttpPost& request_;
  asio::io_context io_;
  beast::tcp_stream stream_;
  tcp::resolver resolver_;
  http::request<http::string_body> message_;
  beast::flat_buffer buffer_;
  http::response_parser<http::string_body> parser_;
  HttpOutcome outcome_;
  bool done_ = false;
  bool cancelled_ = false;
};

}  // namespace

HttpOutcome post(const HttpPost& request) {
  if (std::chrono::steady_clock::now() >= request.deadline)
    return {HttpOutcome::Kind::timed_out, 0, {}, "no time left before the deadline"};
  return Exchange(request).run();
}

}  // namespace chatflow::tools
