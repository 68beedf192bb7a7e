// SQLite plumbing shared by the stores: errors become exceptions that say what failed, prepared
// statements finalise themselves, and a step that is neither a row nor the end (SQLITE_CORRUPT,
// SQLITE_IOERR...) is an error, never taken for the end of the rows.
//
// Text goes in and out by length, not by NUL: model output can contain U+0000, and a C-string
// round trip would silently cut the stored answer short.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include <sqlite3.h>

namespace chatflow::sqlite {

// Throws std::runtime_error("WHAT: SQLite's message") unless `code` is OK, ROW or DONE.
inline void check(sqlite3* database, int code, std::string_view what) {
  if (code == SQLITE_OK || code == SQLITE_ROW || code == SQLITE_DONE) return;
  throw std::runtime_error(std::string(what) + ": " +
                           (database ? sqlite3_errmsg(database) : sqlite3_errstr(code)));
}

// Runs `sql` (one or more statements without results).
inline void exec(sqlite3* database, const char* sql) {
  char* error = nullptr;
  if (sqlite3_exec(database, sql, nullptr, nullptr, &error) != SQLITE_OK) {
    std::string message = error ? error : sqlite3_errmsg(database);
    sqlite3_free(error);
    throw std::runtime_error(message);
  }
}

// A prepared statement that finalises itself.
class Statement {
 public:
  Statement(sqlite3* database, const char* sql) : database_(database) {
    check(database, sqlite3_prepare_v2(database, sql, -1, &statement_, nullptr), sql);
  }
  ~Statement() { sqlite3_finalize(statement_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  sqlite3_stmt* get() { return statement_; }

  // True with a row to read, false at the end; any other result throws.
  bool step() {
    int code = sqlite3_step(statement_);
    if (code == SQLITE_ROW) return true;
    if (code == SQLITE_DONE) return false;
    check(database_, code, sqlite3_sql(statement_));
    return false;
  }
  void reset() { sqlite3_reset(statement_); }

 private:
  sqlite3* database_;
  sqlite3_stmt* statement_ = nullptr;
};

// Refuses a database this process could not keep its promises with: one it cannot write (a
// read-only file or directory, a full disk when the write lock is taken) or one whose pages are
// damaged. Throws std::runtime_error naming the path and the reason; call right after opening.
inline void check_usable(sqlite3* database, const std::string& path) {
  if (sqlite3_db_readonly(database, "main") == 1) {
    throw std::runtime_error(path + " is read-only for this process");
  }
  try {
    exec(database, "BEGIN IMMEDIATE; COMMIT;");
  } catch (const std::exception& error) {
    throw std::runtime_error(path + " cannot be written: " + error.what());
  }
  Statement check(database, "PRAGMA quick_check");
  std::string verdict;
  try {
    if (check.step()) verdict = reinterpret_cast<const char*>(sqlite3_column_text(check.get(), 0));
  } catch (const std::exception& error) {
    throw std::runtime_error(path + " is damaged: " + error.what());
  }
  if (verdict != "ok") throw std::runtime_error(path + " is damaged: " + verdict);
}

inline int bind_text(sqlite3_stmt* statement, int index, std::string_view text) {
  return sqlite3_bind_text(statement, index, text.data(), static_cast<int>(text.size()),
                           SQLITE_TRANSIENT);
}

inline std::string column_text(sqlite3_stmt* statement, int column) {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(statement, column));
  if (!text) return {};
  return std::string(text, static_cast<size_t>(sqlite3_column_bytes(statement, column)));
}

}  // namespace chatflow::sqlite
