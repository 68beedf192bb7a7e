#include "support/postgres_server.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <netinet/in.h>
#include <pwd.h>
#include <sstream>
#include <stdexcept>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

namespace chatflow::testing {
namespace {

int free_port() {
  int socket_fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof address;
  int port = 0;
  if (::bind(socket_fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
      ::getsockname(socket_fd, reinterpret_cast<sockaddr*>(&address), &length) == 0)
    port = ntohs(address.sin_port);
  ::close(socket_fd);
  return port;
}

std::string read_file(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// Runs a shell command with its output in `log`; true when it exits 0.
bool run(const std::string& command, const std::string& log) {
  std::string line = command + " >>'" + log + "' 2>&1";
  return std::system(line.c_str()) == 0;
}

}  // namespace

std::string PostgresServer::binaries() {
  std::vector<std::filesystem::path> found;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/usr/lib/postgresql", error)) {
    if (std::filesystem::exists(entry.path() / "bin" / "postgres")) found.push_back(entry.path());
  }
  if (found.empty()) return {};
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    return std::atoi(a.filename().c_str()) < std::atoi(b.filename().c_str());
  });
  return (found.back() / "bin").string();
}

std::unique_ptr<PostgresServer> PostgresServer::start(std::string& why_not) {
  std::unique_ptr<PostgresServer> server(new PostgresServer);
  server->bin_ = binaries();
  if (server->bin_.empty()) {
    why_not = "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/postgres)";
    return nullptr;
  }
  char pattern[] = "/tmp/chatflow-postgres-XXXXXX";
  if (!::mkdtemp(pattern)) {
    why_not = "cannot make a temporary directory";
    return nullptr;
  }
  server->directory_ = pattern;
  if (::geteuid() == 0) {
    passwd* user = ::getpwnam("postgres");
    if (!user) {
      why_not = "running as root and there is no `postgres` user to run PostgreSQL as";
      return nullptr;
    }
    if (::chown(pattern, user->pw_uid, user->pw_gid) != 0) {
      why_not = "cannot hand the temporary directory to the postgres user";
      return nullptr;
    }
    server->as_user_ = "runuser -u postgres -- ";
  }
  const std::string& directory = server->directory_;
  std::string log = directory + "/setup.log";
  std::string in_directory = "cd '" + directory + "' && " + server->as_user_;
  if (!run(in_directory + server->bin_ + "/initdb -D '" + directory +
               "/data' -U chatflow --auth=trust -E UTF8 --no-sync",
           log)) {
    why_not = "initdb failed:\n" + read_file(log);
    return nullptr;
  }
  // A port another process takes between our probe and the server's bind: try again.
  for (int attempt = 0; attempt < 3; ++attempt) {
    server->port_ = free_port();
    if (server->launch(log)) return server;
  }
  why_not = "PostgreSQL did not start:\n" + read_file(log) + read_file(directory + "/server.log");
  return nullptr;
}

bool PostgresServer::launch(const std::string& log) {
  std::string options = "-p " + std::to_string(port_) + " -k '" + directory_ +
                        "' -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off";
  return run("cd '" + directory_ + "' && " + as_user_ + bin_ + "/pg_ctl -D '" + directory_ +
                 "/data' -l '" + directory_ + "/server.log' -w -t 60 -o \"" + options + "\" start",
             log);
}

void PostgresServer::pause() {
  std::string log = directory_ + "/setup.log";
  if (!run("cd '" + directory_ + "' && " + as_user_ + bin_ + "/pg_ctl -D '" + directory_ +
               "/data' -m fast -w stop",
           log))
    throw std::runtime_error("pg_ctl stop failed:\n" + read_file(log));
}

void PostgresServer::resume() {
  std::string log = directory_ + "/setup.log";
  if (!launch(log))
    throw std::runtime_error("PostgreSQL did not start again:\n" + read_file(log) +
                             read_file(directory_ + "/server.log"));
}

PostgresServer::~PostgresServer() {
  if (port_ != 0) {
    run("cd '" + directory_ + "' && " + as_user_ + bin_ + "/pg_ctl -D '" + directory_ +
            "/data' -m immediate -w stop",
        "/dev/null");
  }
  std::error_code error;
  if (!directory_.empty()) std::filesystem::remove_all(directory_, error);
}

std::string PostgresServer::create_database(const std::string& name) {
  std::string log = directory_ + "/setup.log";
  if (!run(bin_ + "/createdb -h 127.0.0.1 -p " + std::to_string(port_) + " -U chatflow " + name,
           log))
    throw std::runtime_error("createdb " + name + " failed:\n" + read_file(log));
  return url(name);
}

std::string PostgresServer::url(const std::string& database) const {
  return "postgresql://chatflow@127.0.0.1:" + std::to_string(port_) + "/" + database;
}

PostgresServer* shared_postgres_server(std::string& why_not) {
  static std::string reason;
  static std::unique_ptr<PostgresServer> server = PostgresServer::start(reason);
  why_not = reason;
  return server.get();
}

void PostgresDatabaseTest::SetUp() {
  std::string why_not;
  server_ = shared_postgres_server(why_not);
  if (!server_) GTEST_SKIP() << why_not;
  static int databases = 0;
  url_ = server_->create_database("test_" + std::to_string(++databases));
}

}  // namespace chatflow::testing
