#include "support/redis_server.h"

#include <arpa/inet.h>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <netinet/in.h>
#include <signal.h>
#include <stdexcept>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace chatflow::testing {

std::string RedisServer::binary() {
  if (const char* path = std::getenv("REDIS_SERVER"); path && *path) return path;
  const char* search = std::getenv("PATH");
  std::string paths = search ? search : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= paths.size()) {
    size_t end = paths.find(':', start);
    if (end == std::string::npos) end = paths.size();
    std::filesystem::path candidate =
        std::filesystem::path(paths.substr(start, end - start)) / "redis-server";
    if (access(candidate.c_str(), X_OK) == 0) return candidate.string();
    start = end + 1;
  }
  return {};
}

int free_port() {
  int socket_fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof address;
  if (socket_fd < 0 ||
      bind(socket_fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      getsockname(socket_fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    if (socket_fd >= 0) close(socket_fd);
    throw std::runtime_error("no free loopback port");
  }
  int port = ntohs(address.sin_port);
  close(socket_fd);
  return port;
}

namespace {

bool answers(int port) {
  int socket_fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = connect(socket_fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  if (ok) {
    const char ping[] = "PING\r\n";
    char reply[16] = {};
    ok = write(socket_fd, ping, sizeof ping - 1) == sizeof ping - 1 &&
         read(socket_fd, reply, 5) == 5 && std::string(reply, 5) == "+PONG";
  }
  close(socket_fd);
  return ok;
}

}  // namespace

RedisServer::RedisServer(std::vector<std::string> extra) : RedisServer(std::move(extra), {}) {}

RedisServer::RedisServer(std::vector<std::string> extra, RedisTls tls) : extra_(std::move(extra)) {
  if (!tls.certificate_file.empty()) tls_ = std::move(tls);
  char pattern[] = "/tmp/chatflow-redis-test-XXXXXX";
  if (!mkdtemp(pattern)) throw std::runtime_error("cannot make a temporary directory");
  directory_ = pattern;
  port_ = free_port();
  start();
}

RedisServer::~RedisServer() {
  stop();
  std::error_code ignored;
  std::filesystem::remove_all(directory_, ignored);
}

void RedisServer::start() {
  std::string binary_path = binary();
  if (binary_path.empty()) throw std::runtime_error("redis-server is not installed");
  std::vector<std::string> args = {
      binary_path, "--port",    std::to_string(port_),    "--bind", "127.0.0.1",
      "--save",    "",          "--appendonly",           "no",     "--dir",
      directory_,  "--logfile", directory_ + "/redis.log"};
  if (tls_) {
    // The later --port wins: no plaintext port at all.
    args.insert(args.end(), {"--port", "0", "--tls-port", std::to_string(port_), "--tls-cert-file",
                             tls_->certificate_file, "--tls-key-file", tls_->key_file,
                             "--tls-ca-cert-file", tls_->ca_file, "--tls-auth-clients",
                             tls_->require_client_certificates ? "yes" : "no"});
  }
  args.insert(args.end(), extra_.begin(), extra_.end());
  pid_ = fork();
  if (pid_ == 0) {
    std::vector<char*> argv;
    for (auto& arg : args)
      argv.push_back(arg.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  for (int attempt = 0; attempt < 500; ++attempt) {
    // A server with a password answers PING with an error, one with TLS not in plain text:
    // accepting a connection will do then.
    if (answers(port_) || ((!extra_.empty() || tls_) && [&] {
          int probe = socket(AF_INET, SOCK_STREAM, 0);
          sockaddr_in address{};
          address.sin_family = AF_INET;
          address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
          address.sin_port = htons(static_cast<uint16_t>(port_));
          bool ok = connect(probe, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
          close(probe);
          return ok;
        }()))
      return;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("redis-server exited at start (see " + directory_ + "/redis.log)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  throw std::runtime_error("redis-server did not answer within 5 s");
}

void RedisServer::stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

}  // namespace chatflow::testing
