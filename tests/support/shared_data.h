// Locating ../shared (the models and data beside the checkout). Tests that need it skip with a
// clear message when it is absent.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace chatflow::testing {

// The path of `relative` under ../shared, or nullopt when that file does not exist.
std::optional<std::string> shared_file(const std::string& relative);

}  // namespace chatflow::testing

// Skips the current test unless ../shared/`relative` exists; binds its path to `variable`.
#define CHATFLOW_REQUIRE_SHARED(variable, relative)                                                \
  auto variable##_found = ::chatflow::testing::shared_file(relative);                              \
  if (!variable##_found) GTEST_SKIP() << "../shared/" << (relative) << " is not present; skipped"; \
  const std::string variable = *variable##_found
