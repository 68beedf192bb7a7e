// Values for ${VAR} references that take precedence over the environment while a file is read on
// this thread: a serve file's `models:` entry reads the same pipeline file with its own
// ${CHATFLOW_MODEL}, without touching the process's environment (which other threads read).
#pragma once

#include <map>
#include <string>

namespace chatflow {

// While it lives, read_yaml_file and read_yaml_text on this thread take `variables` before the
// environment. Nested scopes hide the outer one.
class ScopedVariables {
 public:
  explicit ScopedVariables(const std::map<std::string, std::string>& variables);
  ~ScopedVariables();
  ScopedVariables(const ScopedVariables&) = delete;
  ScopedVariables& operator=(const ScopedVariables&) = delete;

 private:
  const std::map<std::string, std::string>* outer_;
};

// The value a ScopedVariables on this thread gives `name`, or nullptr.
const std::string* overridden_variable(const std::string& name);

}  // namespace chatflow
