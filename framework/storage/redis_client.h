// A small Redis client for state replicas share: a bounded pool of blocking connections with
// connect and command timeouts, plain or TLS (rediss://, the server's certificate and name always
// verified), URLs with AUTH and SELECT, pipelines, and Lua scripts run by EVALSHA (loaded on
// NOSCRIPT). hiredis encodes commands and parses replies; the bytes go over a net::SocketStream,
// because Debian's hiredis (0.14) speaks no TLS. Every failure is a redis::Error naming the
// endpoint and what failed; no call waits past its timeouts.
//
// A connection that failed (timed out, reset, protocol error) is dropped, never reused: a reply
// may still be on its way. The next call opens a new one. After a failed connect, calls fail at
// once for `retry_interval` instead of each waiting out the connect timeout while Redis is down.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "framework/net/tls_client.h"

struct redisReader;

namespace chatflow::net {
class SocketStream;
}

namespace chatflow::redis {

// Where Redis is: redis://[user:password@]host[:port][/db], the same with rediss:// for TLS, or
// unix:///path/to/socket[?db=N].
struct Endpoint {
  std::string host;
  int port = 6379;
  std::string socket_path;  // set for unix://
  std::string user;
  std::string password;
  int database = 0;
  bool tls = false;         // rediss://
  std::string server_name;  // TLS: the name the certificate must carry; empty: `host`

  // host:port or the socket path (never the password): how errors name it.
  std::string name() const;
};

// Throws std::invalid_argument saying what is wrong with `url`.
Endpoint parse_url(const std::string& url);

// Redis could not be reached or did not answer in time, or answered with an error.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Reply {
  enum class Kind { nil, string, integer, array, status, error };
  Kind kind = Kind::nil;
  std::string text;  // string, status and error replies
  int64_t integer = 0;
  std::vector<Reply> elements;

  bool is_nil() const { return kind == Kind::nil; }
};

using Command = std::vector<std::string>;

// A Lua script, known to Redis by its SHA-1 once loaded.
class Script {
 public:
  explicit Script(std::string source);
  const std::string& source() const { return source_; }
  const std::string& sha1() const { return sha1_; }

 private:
  std::string source_;
  std::string sha1_;
};

struct ClientOptions {
  size_t pool_size = 8;
  std::chrono::milliseconds connect_timeout{250};
  std::chrono::milliseconds command_timeout{250};
  std::chrono::milliseconds retry_interval{500};
  net::TlsClientOptions tls;  // rediss:// only: whom to trust, a client certificate
};

// One connection: not thread-safe; the client lends each to one caller at a time.
class Connection {
 public:
  // Connects (with the TLS handshake, when `tls` is given, within the connect timeout),
  // authenticates and selects the database; throws Error.
  Connection(const Endpoint& endpoint, const net::TlsClientContext* tls,
             std::chrono::milliseconds connect_timeout, std::chrono::milliseconds command_timeout);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Sends every command, then reads every reply (one round trip). An error reply is returned
  // as a reply of kind error; a failure of the connection throws Error and breaks it.
  std::vector<Reply> pipeline(const std::vector<Command>& commands);
  Reply command(const Command& command);
  // Changes how long a call (sending the commands, reading every reply) may take: a blocking
  // XREAD waits longer than a GET.
  void set_command_timeout(std::chrono::milliseconds timeout) { command_timeout_ = timeout; }
  bool broken() const { return broken_; }

 private:
  [[noreturn]] void fail(const std::string& what, const std::string& reason);
  void authenticate_and_select(const Endpoint& endpoint);

  std::string endpoint_name_;
  std::unique_ptr<net::SocketStream> stream_;
  redisReader* reader_ = nullptr;
  std::chrono::milliseconds command_timeout_;
  bool broken_ = false;
};

class Client {
 public:
  // Throws std::invalid_argument when a rediss:// endpoint's TLS files cannot be used, naming
  // the option (ca_file, certificate_file, key_file) and why.
  Client(Endpoint endpoint, ClientOptions options);
  ~Client();

  // Throw Error when Redis cannot be reached or a reply is an error.
  Reply command(const Command& command);
  // Replies in order; error replies are returned, not thrown.
  std::vector<Reply> pipeline(const std::vector<Command>& commands);
  // EVALSHA, loading the script when Redis does not know it (a restart forgets scripts).
  Reply run(const Script& script, const std::vector<std::string>& keys,
            const std::vector<std::string>& args);
  // PING: true when Redis answered; `error` says why not otherwise.
  bool ping(std::string* error = nullptr);

  // A connection of its own, outside the pool (for blocking reads); throws Error.
  std::unique_ptr<Connection> connect_dedicated(std::chrono::milliseconds command_timeout);

  const Endpoint& endpoint() const { return endpoint_; }
  const ClientOptions& options() const { return options_; }

 private:
  // A connection lent to one caller; goes back to the pool unless it broke.
  class Lease;
  std::unique_ptr<Connection> borrow();
  void give_back(std::unique_ptr<Connection> connection);

  Endpoint endpoint_;
  ClientOptions options_;
  std::optional<net::TlsClientContext> tls_;  // for rediss://
  std::mutex mutex_;
  std::condition_variable returned_;
  std::vector<std::unique_ptr<Connection>> idle_;
  size_t open_ = 0;  // lent and idle
  std::chrono::steady_clock::time_point connect_blocked_until_{};
  std::string last_connect_error_;
};

// Throws Error when `reply` is an error reply, naming `what` (the command) and the endpoint.
const Reply& expect_ok(const Reply& reply, const Client& client, const std::string& what);

}  // namespace chatflow::redis
