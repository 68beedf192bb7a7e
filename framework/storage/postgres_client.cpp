#include "framework/storage/postgres_client.h"

#include <cstdio>
#include <cstdlib>
#include <libpq-fe.h>
#include <thread>

namespace chatflow::postgres {
namespace {

constexpr Oid kByteaOid = 17;
// pg_advisory_xact_lock's key for migrations: any fixed number no other lock of chatflow uses
// (the per-tenant locks take the two-key form, a separate key space).
constexpr int64_t kMigrationLock = 0x63686174666c6f77;  // "chatflow"

std::string server_message(pg_conn* connection) {
  std::string message = connection ? PQerrorMessage(connection) : "out of memory";
  while (!message.empty() && (message.back() == '\n' || message.back() == ' '))
    message.pop_back();
  return message;
}

int hex_value(char digit) {
  if (digit >= '0' && digit <= '9') return digit - '0';
  if (digit >= 'a' && digit <= 'f') return digit - 'a' + 10;
  if (digit >= 'A' && digit <= 'F') return digit - 'A' + 10;
  return -1;
}

}  // namespace

std::string describe_server(const std::string& url) {
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(url.c_str(), &error);
  if (!options) {
    PQfreemem(error);
    return "(an unreadable PostgreSQL URL)";
  }
  std::string user, host, port, database;
  for (PQconninfoOption* option = options; option->keyword; ++option) {
    if (!option->val) continue;
    std::string_view keyword = option->keyword;
    if (keyword == "user") user = option->val;
    if (keyword == "host" || (keyword == "hostaddr" && host.empty())) host = option->val;
    if (keyword == "port") port = option->val;
    if (keyword == "dbname") database = option->val;
  }
  PQconninfoFree(options);
  std::string described = "postgresql://";
  if (!user.empty()) described += user + "@";
  described += host.empty() ? "localhost" : host;
  if (!port.empty()) described += ":" + port;
  if (!database.empty()) described += "/" + database;
  return described;
}

Result::~Result() {
  PQclear(result_);
}

Result& Result::operator=(Result&& other) noexcept {
  if (this != &other) {
    PQclear(result_);
    result_ = other.result_;
    other.result_ = nullptr;
  }
  return *this;
}

int Result::rows() const {
  return PQntuples(result_);
}

int64_t Result::changed_rows() const {
  const char* changed = PQcmdTuples(result_);
  return *changed ? std::strtoll(changed, nullptr, 10) : 0;
}

bool Result::is_null(int row, int column) const {
  return PQgetisnull(result_, row, column) == 1;
}

std::string Result::text(int row, int column) const {
  return std::string(PQgetvalue(result_, row, column),
                     static_cast<size_t>(PQgetlength(result_, row, column)));
}

int64_t Result::integer(int row, int column) const {
  if (is_null(row, column)) return 0;
  return std::strtoll(PQgetvalue(result_, row, column), nullptr, 10);
}

std::string Result::bytes(int row, int column) const {
  // bytea in text format is hex: \x followed by two digits a byte.
  std::string_view hex(PQgetvalue(result_, row, column),
                       static_cast<size_t>(PQgetlength(result_, row, column)));
  if (hex.size() < 2 || hex[0] != '\\' || hex[1] != 'x' || hex.size() % 2 != 0)
    throw PostgresError("column " + std::to_string(column) + " is not bytea in hex format");
  std::string decoded;
  decoded.reserve(hex.size() / 2 - 1);
  for (size_t i = 2; i < hex.size(); i += 2) {
    int high = hex_value(hex[i]);
    int low = hex_value(hex[i + 1]);
    if (high < 0 || low < 0)
      throw PostgresError("column " + std::to_string(column) + " has a bad bytea digit");
    decoded.push_back(static_cast<char>(high * 16 + low));
  }
  return decoded;
}

Connection::Connection(pg_conn* connection, std::string server)
    : connection_(connection), server_(std::move(server)) {
  // The server's warnings go to the log under its name (errors come back as exceptions).
  PQsetNoticeProcessor(
      connection_,
      [](void* server, const char* message) {
        std::fprintf(stderr, "chatflow: %s: %s", static_cast<std::string*>(server)->c_str(),
                     message);
      },
      &server_);
}

Connection::~Connection() {
  PQfinish(connection_);
}

bool Connection::healthy() const {
  // Reads what the server sent meanwhile without blocking: a server that closed the connection
  // (a restart, pg_terminate_backend, an idle timeout) marks it bad here rather than in the next
  // statement. Twice: the first read may take only its last message, the second sees the end.
  for (int read = 0; read < 2 && PQstatus(connection_) == CONNECTION_OK; ++read) {
    if (!PQconsumeInput(connection_)) break;
  }
  return PQstatus(connection_) == CONNECTION_OK;
}

bool Connection::reset() {
  PQreset(connection_);
  return healthy();
}

Result Connection::exec(std::string_view sql, const std::vector<Param>& params,
                        std::string_view what) {
  std::string statement(sql);
  std::vector<const char*> values;
  std::vector<int> lengths;
  std::vector<int> formats;
  std::vector<Oid> types;
  for (size_t i = 0; i < params.size(); ++i) {
    const Param& param = params[i];
    if (!param.is_null() && !param.is_bytes() && param.value().find('\0') != std::string::npos) {
      throw PostgresError(server_ + ": " + std::string(what.empty() ? sql : what) +
                          ": text parameter $" + std::to_string(i + 1) +
                          " holds a NUL byte, which PostgreSQL text cannot store");
    }
    values.push_back(param.is_null() ? nullptr : param.value().data());
    lengths.push_back(param.is_null() ? 0 : static_cast<int>(param.value().size()));
    formats.push_back(param.is_bytes() ? 1 : 0);
    types.push_back(param.is_bytes() ? kByteaOid : 0);
  }
  pg_result* result =
      PQexecParams(connection_, statement.c_str(), static_cast<int>(params.size()), types.data(),
                   values.data(), lengths.data(), formats.data(), /*resultFormat=*/0);
  ExecStatusType status = result ? PQresultStatus(result) : PGRES_FATAL_ERROR;
  if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) return Result(result);
  std::string sqlstate;
  std::string message;
  if (result) {
    const char* state = PQresultErrorField(result, PG_DIAG_SQLSTATE);
    if (state) sqlstate = state;
    const char* primary = PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY);
    message = primary ? primary : server_message(connection_);
    PQclear(result);
  } else {
    message = server_message(connection_);
  }
  if (!healthy()) message += " (the connection was lost)";
  throw PostgresError(server_ + ": " + std::string(what.empty() ? sql : what) + ": " + message,
                      sqlstate);
}

Client::Client(ClientOptions options)
    : options_(std::move(options)), server_(describe_server(options_.url)) {
  if (options_.pool_size == 0) throw PostgresError(server_ + ": pool_size must be at least 1");
  // One connection at start: a server that cannot be reached fails the start, not a request.
  open_ = 1;
  give_back(connect());
}

Client::~Client() = default;

std::unique_ptr<Connection> Client::connect() {
  std::string timeout = std::to_string(options_.connect_timeout_s);
  // Notices ("relation already exists, skipping") are not for chatflow's log.
  std::string settings = "-c statement_timeout=" + std::to_string(options_.statement_timeout_ms) +
                         " -c client_min_messages=warning";
  // statement_timeout is the server's: a server that vanished from the network (no reset, no
  // answer) would hold a call for ever. TCP keepalives and a user timeout end such a call from
  // this side, a little after the statement timeout would have.
  int64_t unanswered_ms =
      options_.statement_timeout_ms > 0 ? options_.statement_timeout_ms + 5000 : 60000;
  std::string user_timeout = std::to_string(unanswered_ms);
  // The URL comes first so that the settings after it win over the same ones inside it.
  const char* keywords[] = {"dbname",
                            "connect_timeout",
                            "options",
                            "application_name",
                            "keepalives",
                            "keepalives_idle",
                            "keepalives_interval",
                            "keepalives_count",
                            "tcp_user_timeout",
                            nullptr};
  const char* values[] = {
      options_.url.c_str(), timeout.c_str(), settings.c_str(), "chatflow", "1", "10", "5", "3",
      user_timeout.c_str(), nullptr};
  pg_conn* connection = PQconnectdbParams(keywords, values, /*expand_dbname=*/1);
  if (PQstatus(connection) != CONNECTION_OK) {
    std::string message = server_message(connection);
    PQfinish(connection);
    throw PostgresError("cannot connect to PostgreSQL at " + server_ + ": " + message);
  }
  return std::make_unique<Connection>(connection, server_);
}

Client::Lease::~Lease() {
  if (client_ && connection_) client_->give_back(std::move(connection_));
}

Client::Lease Client::borrow() {
  std::unique_ptr<Connection> idle;
  {
    std::unique_lock lock(mutex_);
    bool available = returned_.wait_for(lock, options_.borrow_timeout, [&] {
      return !idle_.empty() || open_ < options_.pool_size;
    });
    if (!available) {
      throw PostgresError(server_ + ": all " + std::to_string(options_.pool_size) +
                          " pooled connections stayed busy for " +
                          std::to_string(options_.borrow_timeout.count()) + " ms");
    }
    if (!idle_.empty()) {
      idle = std::move(idle_.back());
      idle_.pop_back();
    } else {
      ++open_;  // the slot of the connection opened below
    }
  }
  if (idle) {
    if (idle->healthy() || idle->reset()) return Lease(*this, std::move(idle));
    // The server is still unreachable: connecting in the same slot says why.
  }
  try {
    return Lease(*this, connect());
  } catch (...) {
    std::lock_guard lock(mutex_);
    --open_;
    returned_.notify_one();
    throw;
  }
}

void Client::give_back(std::unique_ptr<Connection> connection) {
  std::lock_guard lock(mutex_);
  if (connection->healthy()) {
    idle_.push_back(std::move(connection));
  } else {
    // A broken connection is dropped; a later borrow connects afresh in its slot.
    --open_;
  }
  returned_.notify_one();
}

Result Client::exec(std::string_view sql, const std::vector<Param>& params, std::string_view what) {
  for (int attempt = 1;; ++attempt) {
    Lease connection = borrow();
    try {
      return connection->exec(sql, params, what);
    } catch (const PostgresError& error) {
      // A connection the server closed just before the statement went out (a restart, a
      // terminated backend) fails it without an answer: once more, on a new connection.
      if (attempt > 1 || connection->healthy() || !error.connection_failed()) throw;
    }
  }
}

void Client::run_transaction(const std::function<void(Connection&)>& body, int attempts) {
  for (int attempt = 1;; ++attempt) {
    Lease connection = borrow();
    bool committing = false;
    auto roll_back = [&] {
      if (!connection->healthy()) return;
      try {
        connection->exec("ROLLBACK");
      } catch (const PostgresError&) {
        // The connection broke while rolling back: the server rolls back on its own.
      }
    };
    try {
      connection->exec("BEGIN");
      body(*connection);
      committing = true;
      connection->exec("COMMIT");
      return;
    } catch (const PostgresError& error) {
      bool lost = !connection->healthy();
      roll_back();
      if (lost && committing)
        throw PostgresError(error.what() + std::string("; whether it committed is unknown"),
                            error.sqlstate(), /*commit_unknown=*/true);
      if ((!error.retryable() && !lost) || attempt >= attempts) throw;
    } catch (...) {
      roll_back();
      throw;
    }
    // Two transactions that aborted each other should not collide again at once.
    std::this_thread::sleep_for(std::chrono::milliseconds(2 * attempt));
  }
}

void Client::migrate(const std::string& component, const std::vector<Migration>& migrations) {
  int known = 0;
  for (const auto& migration : migrations)
    known = std::max(known, migration.version);
  for (const auto& migration : migrations) {
    transaction([&](Connection& connection) {
      connection.exec("SELECT pg_advisory_xact_lock($1)", {Param::integer(kMigrationLock)},
                      "taking the migration lock");
      connection.exec(
          "CREATE TABLE IF NOT EXISTS schema_migrations (component TEXT NOT NULL, version "
          "INTEGER NOT NULL, description TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT "
          "now(), PRIMARY KEY (component, version))",
          {}, "creating schema_migrations");
      Result newest = connection.exec(
          "SELECT COALESCE(MAX(version), 0) FROM schema_migrations WHERE component = $1",
          {Param::text(component)}, "reading schema_migrations");
      int applied = static_cast<int>(newest.integer(0, 0));
      if (applied > known) {
        throw PostgresError(server_ + ": the " + component + " schema is at version " +
                            std::to_string(applied) + " but this chatflow knows versions up to " +
                            std::to_string(known) + ": run a newer chatflow");
      }
      Result done = connection.exec(
          "SELECT 1 FROM schema_migrations WHERE component = $1 AND version = $2",
          {Param::text(component), Param::integer(migration.version)}, "reading schema_migrations");
      if (done.rows() > 0) return;
      std::string what = "migration " + component + " " + std::to_string(migration.version) + " (" +
                         migration.description + ")";
      for (const auto& statement : migration.statements)
        connection.exec(statement, {}, what);
      connection.exec(
          "INSERT INTO schema_migrations (component, version, description) VALUES ($1, $2, $3)",
          {Param::text(component), Param::integer(migration.version),
           Param::text(migration.description)},
          "recording " + what);
    });
  }
}

}  // namespace chatflow::postgres
