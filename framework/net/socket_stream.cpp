#include "framework/net/socket_stream.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <utility>

#include <climits>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

namespace chatflow::net {
namespace {

using Clock = SocketStream::Clock;

int milliseconds_until(Clock::time_point deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return left > INT_MAX ? INT_MAX : static_cast<int>(left);
}

bool is_retry(int error) {
  return error == EAGAIN || error == EWOULDBLOCK || error == EINTR;
}

bool is_connection_lost(int error) {
  return error == EPIPE || error == ECONNRESET || error == ECONNABORTED;
}

// The TLS layer's socket: OpenSSL's own socket BIO write()s, which raises SIGPIPE (and so ends
// the process) when the server has closed the connection; this one sends with MSG_NOSIGNAL.
int descriptor_of(BIO* bio) {
  return static_cast<int>(reinterpret_cast<intptr_t>(BIO_get_data(bio)));
}

int bio_write(BIO* bio, const char* data, int size) {
  BIO_clear_retry_flags(bio);
  ssize_t sent = ::send(descriptor_of(bio), data, static_cast<size_t>(size), MSG_NOSIGNAL);
  if (sent < 0 && is_retry(errno)) BIO_set_retry_write(bio);
  return static_cast<int>(sent);
}

int bio_read(BIO* bio, char* data, int size) {
  BIO_clear_retry_flags(bio);
  ssize_t got = ::recv(descriptor_of(bio), data, static_cast<size_t>(size), 0);
  if (got < 0 && is_retry(errno)) BIO_set_retry_read(bio);
  return static_cast<int>(got);
}

long bio_control(BIO*, int command, long, void*) {
  return command == BIO_CTRL_FLUSH ? 1 : 0;
}

int bio_create(BIO* bio) {
  BIO_set_init(bio, 1);
  return 1;
}

BIO_METHOD* socket_method() {
  static BIO_METHOD* method = [] {
    BIO_METHOD* made =
        BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "chatflow no-SIGPIPE socket");
    BIO_meth_set_write(made, bio_write);
    BIO_meth_set_read(made, bio_read);
    BIO_meth_set_ctrl(made, bio_control);
    BIO_meth_set_create(made, bio_create);
    return made;
  }();
  return method;
}

// Connects the non-blocking `fd` to `address`: empty on success, else why not. Throws
// SocketError (timed_out) at the deadline.
std::string connect_within(int fd, const sockaddr* address, socklen_t length,
                           Clock::time_point deadline) {
  if (::connect(fd, address, length) == 0) return {};
  if (errno != EINPROGRESS && errno != EINTR) return std::strerror(errno);
  pollfd wanted{fd, POLLOUT, 0};
  int ready = 0;
  do {
    ready = ::poll(&wanted, 1, milliseconds_until(deadline));
  } while (ready < 0 && errno == EINTR);
  if (ready == 0) throw SocketError(SocketError::Kind::timed_out, "no answer in time");
  int error = 0;
  socklen_t size = sizeof error;
  if (ready < 0 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0) error = errno;
  return error == 0 ? std::string() : std::strerror(error);
}

}  // namespace

SocketStream SocketStream::connect_tcp(const std::string& host, int port,
                                       Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int status = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (status != 0) {
    throw SocketError(SocketError::Kind::failed,
                      "cannot resolve '" + host + "': " + ::gai_strerror(status));
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> addresses(found, ::freeaddrinfo);
  std::string why = "no address";
  for (addrinfo* address = found; address; address = address->ai_next) {
    int fd = ::socket(address->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    SocketStream stream(fd);
    why = connect_within(fd, address->ai_addr, address->ai_addrlen, deadline);
    if (why.empty()) {
      int on = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
      return stream;
    }
  }
  throw SocketError(SocketError::Kind::failed, why);
}

SocketStream SocketStream::connect_unix(const std::string& path, Clock::time_point deadline) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path)
    throw SocketError(SocketError::Kind::failed, "the socket path is too long");
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) throw SocketError(SocketError::Kind::failed, std::strerror(errno));
  SocketStream stream(fd);
  std::string why =
      connect_within(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address, deadline);
  if (!why.empty()) throw SocketError(SocketError::Kind::failed, why);
  return stream;
}

SocketStream::SocketStream(SocketStream&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), session_(std::exchange(other.session_, nullptr)) {}

SocketStream& SocketStream::operator=(SocketStream&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
    session_ = std::exchange(other.session_, nullptr);
  }
  return *this;
}

SocketStream::~SocketStream() {
  close();
}

void SocketStream::close() {
  // No close_notify: the connection is dropped after a failure as well, when TLS must not be
  // spoken any more, and Redis needs none.
  if (session_) SSL_free(session_);
  session_ = nullptr;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool SocketStream::wait(bool for_write, Clock::time_point deadline) const {
  pollfd wanted{fd_, static_cast<short>(for_write ? POLLOUT : POLLIN), 0};
  while (true) {
    int ready = ::poll(&wanted, 1, milliseconds_until(deadline));
    if (ready > 0) return true;  // ready, or an error the next call reports
    if (ready == 0) return false;
    if (errno != EINTR) return true;
  }
}

void SocketStream::start_tls(const TlsClientContext& tls, const std::string& expected_name,
                             Clock::time_point deadline) {
  session_ = SSL_new(tls.native_handle());
  if (!session_) throw SocketError(SocketError::Kind::failed, "cannot start a TLS session");
  BIO* bio = BIO_new(socket_method());
  if (!bio) throw SocketError(SocketError::Kind::failed, "cannot start a TLS session");
  BIO_set_data(bio, reinterpret_cast<void*>(static_cast<intptr_t>(fd_)));
  SSL_set_bio(session_, bio, bio);
  try {
    tls.prepare(session_, expected_name);
  } catch (const TlsError& error) {
    throw SocketError(SocketError::Kind::failed, error.what());
  }
  SSL_set_connect_state(session_);
  while (true) {
    ERR_clear_error();
    int result = SSL_connect(session_);
    if (result == 1) return;
    int saved_errno = errno;
    int error = SSL_get_error(session_, result);
    if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
      if (!wait(error == SSL_ERROR_WANT_WRITE, deadline))
        throw SocketError(SocketError::Kind::timed_out, "TLS handshake: no answer in time");
      continue;
    }
    std::string fallback;
    if (error == SSL_ERROR_SYSCALL || error == SSL_ERROR_ZERO_RETURN) {
      fallback = saved_errno != 0 && result < 0 ? std::strerror(saved_errno)
                                                : "the server closed the connection";
    }
    throw SocketError(
        SocketError::Kind::failed,
        "TLS handshake failed: " + handshake_failure(session_, expected_name, fallback));
  }
}

void SocketStream::wait_after_tls(int result, const char* doing, Clock::time_point deadline) {
  int saved_errno = errno;
  int error = SSL_get_error(session_, result);
  if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
    if (!wait(error == SSL_ERROR_WANT_WRITE, deadline))
      throw SocketError(SocketError::Kind::timed_out, std::string(doing) + ": no data in time");
    return;
  }
  if (error == SSL_ERROR_ZERO_RETURN || (error == SSL_ERROR_SYSCALL && result == 0) ||
      (error == SSL_ERROR_SYSCALL && is_connection_lost(saved_errno))) {
    ERR_clear_error();
    throw SocketError(SocketError::Kind::closed, "the server closed the connection");
  }
  unsigned long queued = ERR_peek_last_error();
  if (error == SSL_ERROR_SSL && ERR_GET_REASON(queued) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
    ERR_clear_error();
    throw SocketError(SocketError::Kind::closed, "the server closed the connection");
  }
  std::string reason =
      error == SSL_ERROR_SYSCALL ? std::strerror(saved_errno) : handshake_failure(nullptr, "", "");
  throw SocketError(SocketError::Kind::failed, std::string(doing) + ": TLS error: " + reason);
}

void SocketStream::write_all(std::string_view data, Clock::time_point deadline) {
  while (!data.empty()) {
    size_t piece = std::min<size_t>(data.size(), INT_MAX);
    if (session_) {
      ERR_clear_error();
      int written = SSL_write(session_, data.data(), static_cast<int>(piece));
      if (written > 0) {
        data.remove_prefix(static_cast<size_t>(written));
      } else {
        wait_after_tls(written, "writing", deadline);
      }
      continue;
    }
    ssize_t sent = ::send(fd_, data.data(), piece, MSG_NOSIGNAL);
    if (sent > 0) {
      data.remove_prefix(static_cast<size_t>(sent));
    } else if (sent < 0 && is_retry(errno)) {
      if (!wait(true, deadline))
        throw SocketError(SocketError::Kind::timed_out, "writing: no room in time");
    } else {
      int error = sent < 0 ? errno : EPIPE;
      throw SocketError(
          is_connection_lost(error) ? SocketError::Kind::closed : SocketError::Kind::failed,
          std::strerror(error));
    }
  }
}

size_t SocketStream::read_some(char* buffer, size_t size, Clock::time_point deadline) {
  size = std::min<size_t>(size, INT_MAX);
  while (true) {
    if (session_) {
      // Records OpenSSL already holds are read before the socket is waited on.
      ERR_clear_error();
      int got = SSL_read(session_, buffer, static_cast<int>(size));
      if (got > 0) return static_cast<size_t>(got);
      wait_after_tls(got, "reading", deadline);
      continue;
    }
    // The reply is rarely there the moment a command is sent: wait first, read once.
    if (!wait(false, deadline))
      throw SocketError(SocketError::Kind::timed_out, "reading: no data in time");
    ssize_t got = ::recv(fd_, buffer, size, 0);
    if (got > 0) return static_cast<size_t>(got);
    if (got == 0) throw SocketError(SocketError::Kind::closed, "the server closed the connection");
    if (is_retry(errno)) continue;
    throw SocketError(
        is_connection_lost(errno) ? SocketError::Kind::closed : SocketError::Kind::failed,
        std::strerror(errno));
  }
}

}  // namespace chatflow::net
