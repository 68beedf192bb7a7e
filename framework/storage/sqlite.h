// Text in and out of SQLite by length, not by NUL: model output can contain U+0000, and a
// C-string round trip would silently cut the stored answer short.
#pragma once

#include <string>
#include <string_view>

#include <sqlite3.h>

namespace chatflow::sqlite {

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
