// PostgreSQL plumbing shared by the stores that keep state across replicas (the usage ledger,
// session history): a bounded pool of libpq connections, parameterised statements only,
// transactions retried when the server aborts them for a serialization failure or a deadlock,
// and migrations applied at start under an advisory lock so replicas starting together do not
// race. Every error names the server (its URL without the password) and what failed.
//
// Text parameters cannot carry U+0000 (libpq sends them NUL-terminated): bytes that may hold
// anything (model output, client text) go as bytea with Param::bytes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

struct pg_conn;
struct pg_result;

namespace chatflow::postgres {

// What failed, on which server, and the server's SQLSTATE (empty when no server answered).
class PostgresError : public std::runtime_error {
 public:
  PostgresError(const std::string& message, std::string sqlstate = {}, bool commit_unknown = false)
      : std::runtime_error(message),
        sqlstate_(std::move(sqlstate)),
        commit_unknown_(commit_unknown) {}
  const std::string& sqlstate() const { return sqlstate_; }
  // The connection broke during COMMIT: the transaction may or may not have committed.
  bool commit_unknown() const { return commit_unknown_; }
  // The server aborted the transaction so that it can be run again: serialization_failure
  // (40001) or deadlock_detected (40P01).
  bool retryable() const { return sqlstate_ == "40001" || sqlstate_ == "40P01"; }
  // No server answered: it could not be reached, the connection broke, or it is shutting down
  // (SQLSTATE classes 08 and 57P).
  bool connection_failed() const {
    return sqlstate_.empty() || sqlstate_.starts_with("08") || sqlstate_.starts_with("57P");
  }

 private:
  std::string sqlstate_;
  bool commit_unknown_ = false;
};

struct ClientOptions {
  std::string url;  // postgresql://user:password@host:port/database, or key=value pairs
  size_t pool_size = 4;
  int connect_timeout_s = 5;
  int statement_timeout_ms = 5000;
  // How long a caller waits for a free connection when all pool_size are in use.
  std::chrono::milliseconds borrow_timeout{10000};
};

// `url` as it may be shown: user, host, port and database, never the password.
std::string describe_server(const std::string& url);

// One statement parameter: text, bytes (bytea, any byte values), an integer, or NULL.
class Param {
 public:
  static Param text(std::string_view value) { return Param(std::string(value), false); }
  static Param bytes(std::string_view value) { return Param(std::string(value), true); }
  static Param integer(int64_t value) { return Param(std::to_string(value), false); }
  static Param null() { return Param(); }

  bool is_null() const { return !value_; }
  bool is_bytes() const { return bytes_; }
  const std::string& value() const { return *value_; }

 private:
  Param() = default;
  Param(std::string value, bool bytes) : value_(std::move(value)), bytes_(bytes) {}
  std::optional<std::string> value_;
  bool bytes_ = false;
};

// A statement's rows (text format); frees itself.
class Result {
 public:
  explicit Result(pg_result* result) : result_(result) {}
  ~Result();
  Result(Result&& other) noexcept : result_(other.result_) { other.result_ = nullptr; }
  Result& operator=(Result&& other) noexcept;
  Result(const Result&) = delete;
  Result& operator=(const Result&) = delete;

  int rows() const;
  // Rows an INSERT, UPDATE or DELETE changed.
  int64_t changed_rows() const;
  bool is_null(int row, int column) const;
  std::string text(int row, int column) const;
  int64_t integer(int row, int column) const;    // 0 for NULL
  std::string bytes(int row, int column) const;  // a bytea column, decoded

 private:
  pg_result* result_;
};

// One open connection to the server, borrowed from a Client's pool.
class Connection {
 public:
  Connection(pg_conn* connection, std::string server);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Runs one statement with $1, $2... bound to `params`; throws PostgresError naming the
  // server, `what` (or the statement) and the server's message.
  Result exec(std::string_view sql, const std::vector<Param>& params = {},
              std::string_view what = {});
  bool healthy() const;
  // Reconnects a broken connection; false when the server still cannot be reached.
  bool reset();

 private:
  pg_conn* connection_;
  std::string server_;
};

// A migration: one step of a component's schema, its statements run in one transaction.
struct Migration {
  int version = 0;
  std::string description;
  std::vector<std::string> statements;
};

class Client {
 public:
  // Connects once to check that the server can be reached and answers; throws PostgresError
  // naming the server otherwise.
  explicit Client(ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // A connection for the caller alone until the lease ends; it then goes back to the pool (a
  // broken one is reset first, or dropped so that a later borrow connects afresh).
  class Lease {
   public:
    Lease(Client& client, std::unique_ptr<Connection> connection)
        : client_(&client), connection_(std::move(connection)) {}
    Lease(Lease&& other) noexcept = default;
    ~Lease();
    Connection& operator*() { return *connection_; }
    Connection* operator->() { return connection_.get(); }

   private:
    Client* client_;
    std::unique_ptr<Connection> connection_;
  };
  // Throws PostgresError when no connection is free within borrow_timeout, or none can be
  // opened.
  Lease borrow();

  // One statement on a pooled connection, in its own transaction. A statement whose connection
  // broke without an answer is sent once more on a new connection, so it must be safe to run
  // twice (a read, an upsert); other writes go through transaction().
  Result exec(std::string_view sql, const std::vector<Param>& params = {},
              std::string_view what = {});

  // Runs `body` between BEGIN and COMMIT on one pooled connection and returns what it returns.
  // A transaction the server aborted for a serialization failure or a deadlock, or whose
  // connection broke before COMMIT was sent, is rolled back and run again (up to `attempts`
  // times); any other error rolls back and is thrown. A connection lost during COMMIT is
  // thrown, never retried: whether it committed is unknown.
  template <class Body>
  auto transaction(Body&& body, int attempts = 5) -> decltype(body(std::declval<Connection&>())) {
    using Value = decltype(body(std::declval<Connection&>()));
    if constexpr (std::is_void_v<Value>) {
      run_transaction([&](Connection& connection) { body(connection); }, attempts);
    } else {
      std::optional<Value> value;
      run_transaction([&](Connection& connection) { value.emplace(body(connection)); }, attempts);
      return std::move(*value);
    }
  }

  // Brings `component`'s schema to its latest version: each migration not yet recorded in
  // schema_migrations runs in its own transaction under a database-wide advisory lock, so that
  // replicas starting together apply each exactly once. Throws PostgresError when one fails, or
  // when the database holds a newer version than `migrations` knows.
  void migrate(const std::string& component, const std::vector<Migration>& migrations);

  // The server as errors and logs name it (no password).
  const std::string& server() const { return server_; }
  const ClientOptions& options() const { return options_; }

 private:
  void run_transaction(const std::function<void(Connection&)>& body, int attempts);
  std::unique_ptr<Connection> connect();
  void give_back(std::unique_ptr<Connection> connection);

  ClientOptions options_;
  std::string server_;
  std::mutex mutex_;
  std::condition_variable returned_;
  std::vector<std::unique_ptr<Connection>> idle_;
  size_t open_ = 0;  // connections lent out or idle
};

}  // namespace chatflow::postgres
