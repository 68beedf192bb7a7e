// A loopback server for the HTTP clients' tests that answers every connection with the same
// bytes, written by the test (a 200, a chunked answer with an oversized trailer), in plain text
// or over TLS with a given certificate, on a thread of its own until the object goes.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>

namespace chatflow::testing {

class CannedServer {
 public:
  // Throws when the certificate or key cannot be loaded.
  explicit CannedServer(std::string answer, const std::string& certificate_file = {},
                        const std::string& key_file = {});
  ~CannedServer();
  CannedServer(const CannedServer&) = delete;
  CannedServer& operator=(const CannedServer&) = delete;

  std::string port() const;
  // Requests answered so far (counted as the answer starts).
  int answered() const { return answered_; }

 private:
  void serve();
  template <class Stream>
  void answer(Stream& stream);

  std::string answer_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::optional<boost::asio::ssl::context> tls_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> answered_{0};
  std::thread thread_;
};

}  // namespace chatflow::testing
