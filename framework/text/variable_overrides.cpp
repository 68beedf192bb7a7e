#include "framework/text/variable_overrides.h"

namespace chatflow {
namespace {
thread_local const std::map<std::string, std::string>* current_variables = nullptr;
}

ScopedVariables::ScopedVariables(const std::map<std::string, std::string>& variables)
    : outer_(current_variables) {
  current_variables = &variables;
}

ScopedVariables::~ScopedVariables() {
  current_variables = outer_;
}

const std::string* overridden_variable(const std::string& name) {
  if (!current_variables) return nullptr;
  auto found = current_variables->find(name);
  return found == current_variables->end() ? nullptr : &found->second;
}

}  // namespace chatflow
