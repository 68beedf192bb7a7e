#include "framework/tools/http_post.h"

#include <charconv>
#include <optional>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "framework/net/asio_tls.h"

namespace chatflow::tools {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

namespace {

// What the answer's status line, header and trailer may take in the read buffer. Beast's field
// store throws (std::length_error) on a single field of 64 KiB, and nothing bounds a chunked
// body's trailer otherwise: this keeps any field far below that, and an answer that goes past
// it fails with buffer_overflow instead. The body itself streams through and has its own limit.
constexpr size_t kMaxHeadBytes = 32 * 1024;

}  // namespace

std::optional<HttpEndpoint> parse_http_url(std::string_view url, std::string& error) {
  HttpEndpoint endpoint;
  std::string_view rest;
  if (url.substr(0, 7) == "http://") {
    rest = url.substr(7);
  } else if (url.substr(0, 8) == "https://") {
    rest = url.substr(8);
    endpoint.tls = true;
    endpoint.port = "443";
  } else {
    error = "'" + std::string(url) + "' is not an http:// or https:// URL";
    return std::nullopt;
  }
  size_t slash = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, slash);
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

// The Host header: the host (bracketed when it is an IPv6 address), with the port unless it is
// the scheme's default.
std::string host_header(const HttpEndpoint& endpoint) {
  std::string host =
      endpoint.host.find(':') == std::string::npos ? endpoint.host : "[" + endpoint.host + "]";
  bool default_port = endpoint.port == (endpoint.tls ? "443" : "80");
  return default_port ? host : host + ":" + endpoint.port;
}

// The context of https calls that name no CA file: the system's trust store, made once.
const net::TlsClientContext& system_trust() {
  static const net::TlsClientContext context{net::TlsClientOptions{}};
  return context;
}

// One exchange on its own io_context, run in slices so that a cancelled request is noticed
// within a slice even while the endpoint says nothing.
class Exchange {
 public:
  explicit Exchange(const HttpPost& request) : request_(request), resolver_(io_) {
    parser_.body_limit(request.max_body_bytes);
    if (request.endpoint->tls) {
      tls_context_.emplace(net::asio_context(request.tls ? *request.tls : system_trust()));
      tls_stream_.emplace(io_, *tls_context_);
    } else {
      plain_stream_.emplace(io_);
    }
  }

  HttpOutcome run() {
    const HttpEndpoint& endpoint = *request_.endpoint;
    message_.method(request_.method == "GET" ? http::verb::get : http::verb::post);
    message_.target(endpoint.target);
    message_.version(11);
    message_.set(http::field::host, host_header(endpoint));
    message_.set(http::field::user_agent, "chatflow-agent");
    message_.set(http::field::connection, "close");
    for (const auto& [name, value] : request_.headers)
      message_.set(name, value);
    message_.body() = request_.body;
    message_.prepare_payload();
    tcp_stream().expires_at(request_.deadline);
    resolver_.async_resolve(endpoint.host, endpoint.port,
                            [this](beast::error_code error, tcp::resolver::results_type results) {
                              if (error) return finish(HttpOutcome::Kind::connect_failed, error);
                              connect(results);
                            });
    constexpr auto kSlice = std::chrono::milliseconds(20);
    while (!io_.stopped()) {
      try {
        io_.run_for(kSlice);
      } catch (const std::exception& error) {
        // Nothing of one call may end the caller's thread (an agent loop, the exporter).
        outcome_ = {HttpOutcome::Kind::failed, 0, {}, describe() + ": " + error.what(), {}};
        return outcome_;
      }
      if (done_) break;
      if (request_.cancelled && request_.cancelled()) {
        cancelled_ = true;
        resolver_.cancel();
        tcp_stream().cancel();
      }
      if (std::chrono::steady_clock::now() > request_.deadline) {
        // Resolution is not covered by the stream's expiry.
        resolver_.cancel();
        tcp_stream().cancel();
      }
    }
    return outcome_;
  }

 private:
  beast::tcp_stream& tcp_stream() {
    return tls_stream_ ? tls_stream_->next_layer() : *plain_stream_;
  }

  std::string describe() const { return request_.endpoint->host + ":" + request_.endpoint->port; }

  template <class Use>
  void with_stream(Use&& use) {
    if (tls_stream_) {
      use(*tls_stream_);
    } else {
      use(*plain_stream_);
    }
  }

  void connect(const tcp::resolver::results_type& results) {
    tcp_stream().async_connect(results, [this](beast::error_code error, const tcp::endpoint&) {
      if (error) return finish(HttpOutcome::Kind::connect_failed, error);
      if (!tls_stream_) return exchange();
      const std::string& host = request_.endpoint->host;
      try {
        (request_.tls ? *request_.tls : system_trust()).prepare(tls_stream_->native_handle(), host);
      } catch (const net::TlsError& failure) {
        return fail("TLS with " + describe() + ": " + failure.what());
      }
      tls_stream_->async_handshake(ssl::stream_base::client, [this](beast::error_code error) {
        if (!error) return exchange();
        if (error == beast::error::timeout || cancelled_)
          return finish(HttpOutcome::Kind::failed, error);
        fail("TLS handshake with " + describe() + " failed: " +
             net::handshake_failure(tls_stream_->native_handle(), request_.endpoint->host,
                                    error.message()));
      });
    });
  }

  void exchange() {
    with_stream([this](auto& stream) {
      http::async_write(stream, message_, [this, &stream](beast::error_code error, size_t) {
        if (error) return finish(HttpOutcome::Kind::failed, error);
        http::async_read(stream, buffer_, parser_, [this](beast::error_code error, size_t) {
          if (error) return finish(HttpOutcome::Kind::failed, error);
          outcome_.kind = HttpOutcome::Kind::response;
          outcome_.status = static_cast<int>(parser_.get().result_int());
          outcome_.body = std::move(parser_.get().body());
          for (const auto& field : parser_.get())
            outcome_.headers.emplace_back(std::string(field.name_string()),
                                          std::string(field.value()));
          done_ = true;
        });
      });
    });
  }

  void fail(const std::string& why) {
    done_ = true;
    outcome_.kind = HttpOutcome::Kind::failed;
    outcome_.error = why;
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
    } else if (error == http::error::buffer_overflow || error == http::error::header_limit) {
      outcome_.kind = HttpOutcome::Kind::failed;
      outcome_.error = "the answer's header or trailer is longer than " +
                       std::to_string(kMaxHeadBytes) + " bytes";
    } else {
      outcome_.kind = kind;
      outcome_.error = error.message();
    }
  }

  const HttpPost& request_;
  asio::io_context io_;
  std::optional<ssl::context> tls_context_;  // before the stream that uses it
  std::optional<beast::tcp_stream> plain_stream_;
  std::optional<beast::ssl_stream<beast::tcp_stream>> tls_stream_;
  tcp::resolver resolver_;
  http::request<http::string_body> message_;
  beast::flat_buffer buffer_{kMaxHeadBytes};
  http::response_parser<http::string_body> parser_;
  HttpOutcome outcome_;
  bool done_ = false;
  bool cancelled_ = false;
};

}  // namespace

HttpOutcome post(const HttpPost& request) {
  if (std::chrono::steady_clock::now() >= request.deadline)
    return {HttpOutcome::Kind::timed_out, 0, {}, "no time left before the deadline", {}};
  return Exchange(request).run();
}

}  // namespace chatflow::tools
