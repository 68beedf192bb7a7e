// A real redis-server for tests: on a free loopback port, in its own temporary directory, with
// nothing saved to disk, stopped when the object goes. Tests skip when redis-server is missing.
#pragma once

#include <string>
#include <sys/types.h>
#include <vector>

namespace chatflow::testing {

class RedisServer {
 public:
  // The path of redis-server (REDIS_SERVER, else found on PATH), empty when there is none.
  static std::string binary();

  // Starts it (`extra` are more command-line options, e.g. {"--requirepass", "secret"}) and
  // waits until it answers; throws std::runtime_error when it does not start.
  explicit RedisServer(std::vector<std::string> extra = {});
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

  // Stops it (SIGTERM, waited for) and starts it again on the same port, empty.
  void stop();
  void start();

 private:
  std::vector<std::string> extra_;
  std::string directory_;
  int port_ = 0;
  pid_t pid_ = -1;
};

// A loopback port nothing listens on (bound and released).
int free_port();

}  // namespace chatflow::testing
