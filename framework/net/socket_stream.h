// A connected stream socket (TCP or a Unix socket), plain or TLS, for blocking clients whose
// every step must end by a deadline: connecting, the TLS handshake, each write and each read
// wait at most until the deadline the caller gives, however slowly the peer trickles bytes.
// Non-blocking underneath (poll), and never raises SIGPIPE when the peer has gone.
#pragma once

#include <chrono>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

#include "framework/net/tls_client.h"

namespace chatflow::net {

class SocketError : public std::runtime_error {
 public:
  enum class Kind { timed_out, closed, failed };
  SocketError(Kind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

class SocketStream {
 public:
  using Clock = std::chrono::steady_clock;

  // Connects to host:port (each address the name resolves to, in turn) by `deadline`. Name
  // resolution itself is the system resolver's and is not bounded by the deadline. Throws
  // SocketError.
  static SocketStream connect_tcp(const std::string& host, int port, Clock::time_point deadline);
  static SocketStream connect_unix(const std::string& path, Clock::time_point deadline);

  SocketStream(SocketStream&& other) noexcept;
  SocketStream& operator=(SocketStream&& other) noexcept;
  ~SocketStream();

  // The TLS handshake; the certificate must carry `expected_name` (see TlsClientContext).
  // Throws SocketError saying why the handshake failed.
  void start_tls(const TlsClientContext& tls, const std::string& expected_name,
                 Clock::time_point deadline);
  bool is_tls() const { return session_ != nullptr; }

  // All of `data`, or SocketError.
  void write_all(std::string_view data, Clock::time_point deadline);
  // At least one byte (as many as are there, up to `size`); SocketError of kind `closed` when
  // the peer ended the stream.
  size_t read_some(char* buffer, size_t size, Clock::time_point deadline);

 private:
  explicit SocketStream(int fd) : fd_(fd) {}
  void close();
  // Waits until the socket is readable (`for_write` false) or writable; false at the deadline.
  bool wait(bool for_write, Clock::time_point deadline) const;
  // After a TLS call returned `result` <= 0: returns once the socket is ready for the call to
  // be retried; throws SocketError, naming `doing`, when it cannot be.
  void wait_after_tls(int result, const char* doing, Clock::time_point deadline);

  int fd_ = -1;
  ssl_st* session_ = nullptr;
};

}  // namespace chatflow::net
