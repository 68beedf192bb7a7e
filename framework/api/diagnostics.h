// Configuration errors are collected, not thrown one at a time: a user fixing a YAML file wants
// every problem of the file in one run, each pointing at the exact place (file:line:column).
#pragma once

#include <string>
#include <vector>

namespace chatflow {

// A place in a configuration file; line and column count from 1. A location with line 0 means
// "the whole file" (e.g. the file cannot be opened).
struct SourceLocation {
  std::string file;
  int line = 0;
  int column = 0;

  std::string to_string() const;
};

struct Diagnostic {
  SourceLocation where;
  std::string message;

  // "file:line:col: error: message", the format compilers use, so editors can jump to it.
  std::string to_string() const;
};

class Diagnostics {
 public:
  void error(SourceLocation where, std::string message);
  void append(const Diagnostics& other);

  bool empty() const { return errors_.empty(); }
  size_t size() const { return errors_.size(); }
  const std::vector<Diagnostic>& errors() const { return errors_; }

  // All errors, one per line, in the order they were found.
  std::string to_string() const;

 private:
  std::vector<Diagnostic> errors_;
};

}  // namespace chatflow
