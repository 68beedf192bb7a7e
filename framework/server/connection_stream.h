// The byte stream under a connection: plain TCP, or TLS over TCP on a server.tls address. One
// type for both, so the connection's reading, writing and timeouts are written once: Beast's
// HTTP reader and Asio's writer see an ordinary async stream, and the TCP layer underneath (for
// timeouts, readiness and shutdown) is always at hand.
#pragma once

#include <memory>
#include <utility>
#include <variant>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

namespace chatflow::server {

class ConnectionStream {
 public:
  using TcpStream = boost::beast::tcp_stream;
  using TlsStream = boost::beast::ssl_stream<TcpStream>;
  using executor_type = TcpStream::executor_type;

  // With `tls`, the connection must complete a server handshake (async_handshake) first.
  ConnectionStream(boost::asio::ip::tcp::socket socket,
                   std::shared_ptr<boost::asio::ssl::context> tls)
      : tls_context_(std::move(tls)), stream_(make(std::move(socket), tls_context_)) {}

  executor_type get_executor() noexcept { return tcp().get_executor(); }
  bool is_tls() const { return std::holds_alternative<TlsStream>(stream_); }

  TcpStream& tcp() {
    if (auto* tls = std::get_if<TlsStream>(&stream_)) return tls->next_layer();
    return std::get<TcpStream>(stream_);
  }
  boost::asio::ip::tcp::socket& socket() { return tcp().socket(); }
  // The OpenSSL session; nullptr on a plain connection.
  SSL* tls_session() {
    auto* tls = std::get_if<TlsStream>(&stream_);
    return tls ? tls->native_handle() : nullptr;
  }

  template <class Duration>
  void expires_after(Duration duration) {
    tcp().expires_after(duration);
  }

  template <class MutableBuffers, class Handler>
  void async_read_some(const MutableBuffers& buffers, Handler&& handler) {
    if (auto* tls = std::get_if<TlsStream>(&stream_)) {
      tls->async_read_some(buffers, std::forward<Handler>(handler));
    } else {
      std::get<TcpStream>(stream_).async_read_some(buffers, std::forward<Handler>(handler));
    }
  }

  template <class ConstBuffers, class Handler>
  void async_write_some(const ConstBuffers& buffers, Handler&& handler) {
    if (auto* tls = std::get_if<TlsStream>(&stream_)) {
      tls->async_write_some(buffers, std::forward<Handler>(handler));
    } else {
      std::get<TcpStream>(stream_).async_write_some(buffers, std::forward<Handler>(handler));
    }
  }

  // TLS only.
  template <class Handler>
  void async_handshake(Handler&& handler) {
    std::get<TlsStream>(stream_).async_handshake(boost::asio::ssl::stream_base::server,
                                                 std::forward<Handler>(handler));
  }
  // TLS only: sends close_notify and waits for the client's.
  template <class Handler>
  void async_shutdown(Handler&& handler) {
    std::get<TlsStream>(stream_).async_shutdown(std::forward<Handler>(handler));
  }

 private:
  static std::variant<TcpStream, TlsStream> make(
      boost::asio::ip::tcp::socket socket, const std::shared_ptr<boost::asio::ssl::context>& tls) {
    if (!tls)
      return std::variant<TcpStream, TlsStream>(std::in_place_type<TcpStream>, std::move(socket));
    return std::variant<TcpStream, TlsStream>(std::in_place_type<TlsStream>,
                                              TcpStream(std::move(socket)), *tls);
  }

  // The connection's own reference: the context may be replaced (a reload) while it is open.
  std::shared_ptr<boost::asio::ssl::context> tls_context_;
  std::variant<TcpStream, TlsStream> stream_;
};

}  // namespace chatflow::server
