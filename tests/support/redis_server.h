// A real redis-server for tests: on a free loopback port, in its own temporary directory, with
// nothing saved to disk, stopped when the object goes. Tests skip when redis-server is missing.
#pragma once

#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace chatflow::testing {

// TLS on the server's port (and no plaintext port): its certificate and key, the CA that client
// certificates must come from, and whether it asks for one.
struct RedisTls {
  std::string certificate_file;
  std::string key_file;
  std::string ca_file;
  bool require_client_certificates = false;
};

class RedisServer {
 public:
  // The path of redis-server (REDIS_SERVER, else found on PATH), empty when there is none.
  static std::string binary();

  // Starts it (`extra` are more command-line options, e.g. {"--requirepass", "secret"}) and
  // waits until it answers; throws std::runtime_error when it does not start.
  explicit RedisServer(std::vector<std::string> extra = {});
  // The same, speaking only TLS on its port.
  RedisServer(std::vector<std::string> extra, RedisTls tls);
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  // redis://127.0.0.1:port, or rediss://localhost:port with TLS (the name its certificate has).
  std::string url() const {
    return tls_ ? "rediss://localhost:" + std::to_string(port_)
                : "redis://127.0.0.1:" + std::to_string(port_);
  }

  // Stops it (SIGTERM, waited for) and starts it again on the same port, empty.
  void stop();
  void start();

 private:
  std::vector<std::string> extra_;
  std::optional<RedisTls> tls_;
  std::string directory_;
  int port_ = 0;
  pid_t pid_ = -1;
};

// A loopback port nothing listens on (bound and released).
int free_port();

}  // namespace chatflow::testing
