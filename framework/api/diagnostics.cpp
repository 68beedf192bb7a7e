#include "framework/api/diagnostics.h"

namespace chatflow {

std::string SourceLocation::to_string() const {
  if (line <= 0) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

std::string Diagnostic::to_string() const {
  return where.to_string() + ": error: " + message;
}

void Diagnostics::error(SourceLocation where, std::string message) {
  errors_.push_back({std::move(where), std::move(message)});
}

void Diagnostics::append(const Diagnostics& other) {
  errors_.insert(errors_.end(), other.errors_.begin(), other.errors_.end());
}

std::string Diagnostics::to_string() const {
  std::string text;
  for (const auto& error : errors_) {
    text += error.to_string();
    text += '\n';
  }
  return text;
}

}  // namespace chatflow
