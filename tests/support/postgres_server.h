// A PostgreSQL server of the test's own: initdb in a temporary directory, `postgres` on a free
// loopback port with its socket in that directory and fsync off (speed; the tests kill chatflow,
// never the server's machine), stopped and removed at the end. PostgreSQL refuses to run as
// root: as root, initdb and postgres run as the `postgres` user (Debian's package makes it).
#pragma once

#include <memory>
#include <string>

#include <gtest/gtest.h>

namespace chatflow::testing {

class PostgresServer {
 public:
  // The newest /usr/lib/postgresql/*/bin; empty when PostgreSQL is not installed.
  static std::string binaries();
  // A running server, or nullptr with `why_not` set (no binaries, no `postgres` user as root, a
  // failed initdb or start: its log is in the message).
  static std::unique_ptr<PostgresServer> start(std::string& why_not);
  ~PostgresServer();  // stops the server and removes its directory

  int port() const { return port_; }
  // Stops the server (fast shutdown: its clients are disconnected), as an outage would, and
  // starts it again on the same port with the same data; both throw std::runtime_error when
  // pg_ctl fails.
  void pause();
  void resume();
  // A new, empty database on the server and its URL (user `chatflow`, no password).
  std::string create_database(const std::string& name);
  std::string url(const std::string& database) const;

 private:
  PostgresServer() = default;
  std::string directory_;
  std::string bin_;
  // pg_ctl start on port_; true when the server runs.
  bool launch(const std::string& log);
  std::string as_user_;  // "runuser -u postgres -- " as root, else empty
  int port_ = 0;
};

// The one server of this test program, started on first use (nullptr with `why_not` when it
// cannot be), stopped when the program exits.
PostgresServer* shared_postgres_server(std::string& why_not);

// A test with a new database of its own on the shared server (`url_`); skipped, saying why,
// where PostgreSQL cannot run.
class PostgresDatabaseTest : public ::testing::Test {
 protected:
  void SetUp() override;
  PostgresServer* server_ = nullptr;
  std::string url_;
};

}  // namespace chatflow::testing
