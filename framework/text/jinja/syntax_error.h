// The error a template that cannot be loaded raises: what was wrong, and where.
#pragma once

#include <stdexcept>
#include <string>

namespace chatflow::jinja {

struct SourcePosition {
  int line = 1;    // 1-based
  int column = 1;  // 1-based, in bytes
};

class SyntaxError : public std::runtime_error {
 public:
  SyntaxError(SourcePosition position, const std::string& message)
      : std::runtime_error("line " + std::to_string(position.line) + ", column " +
                           std::to_string(position.column) + ": " + message),
        position_(position),
        message_(message) {}
  SourcePosition position() const { return position_; }
  const std::string& message() const { return message_; }

 private:
  SourcePosition position_;
  std::string message_;
};

}  // namespace chatflow::jinja
