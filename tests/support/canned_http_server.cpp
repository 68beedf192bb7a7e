#include "support/canned_http_server.h"

#include <sys/socket.h>

#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/write.hpp>

namespace chatflow::testing {
namespace asio = boost::asio;
using asio::ip::tcp;

CannedServer::CannedServer(std::string answer, const std::string& certificate_file,
                           const std::string& key_file)
    : answer_(std::move(answer)),
      acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
  if (!certificate_file.empty()) {
    tls_.emplace(asio::ssl::context::tls_server);
    tls_->use_certificate_chain_file(certificate_file);
    tls_->use_private_key_file(key_file, asio::ssl::context::pem);
  }
  thread_ = std::thread([this] { serve(); });
}

CannedServer::~CannedServer() {
  stopping_ = true;
  // Wakes the blocking accept (closing the socket would not, on Linux).
  ::shutdown(acceptor_.native_handle(), SHUT_RDWR);
  thread_.join();
}

std::string CannedServer::port() const {
  return std::to_string(acceptor_.local_endpoint().port());
}

void CannedServer::serve() {
  while (!stopping_) {
    boost::system::error_code error;
    tcp::socket socket(io_);
    acceptor_.accept(socket, error);
    if (error) return;
    if (tls_) {
      asio::ssl::stream<tcp::socket> stream(std::move(socket), *tls_);
      stream.handshake(asio::ssl::stream_base::server, error);
      if (!error) answer(stream);
    } else {
      answer(socket);
    }
  }
}

// Once the request's head has come, or a TLS handshake where plain text was expected.
template <class Stream>
void CannedServer::answer(Stream& stream) {
  boost::system::error_code error;
  std::string request;
  char piece[4096];
  while (request.find("\r\n\r\n") == std::string::npos &&
         (request.empty() || request[0] != '\x16')) {
    size_t got = stream.read_some(asio::buffer(piece), error);
    if (error) return;
    request.append(piece, got);
  }
  // Counted before the answer goes out: a client may read it and its test check the count
  // before this thread runs again.
  ++answered_;
  asio::write(stream, asio::buffer(answer_), error);
}

}  // namespace chatflow::testing
