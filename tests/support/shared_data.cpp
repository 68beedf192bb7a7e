#include "shared_data.h"

#include <cstdlib>

namespace chatflow::testing {

std::optional<std::string> shared_file(const std::string& relative) {
  // CHATFLOW_SHARED_DIR lets a checkout elsewhere point at the data.
  std::filesystem::path root = std::getenv("CHATFLOW_SHARED_DIR")
                                   ? std::getenv("CHATFLOW_SHARED_DIR")
                                   : std::filesystem::path(CHATFLOW_SOURCE_DIR) / ".." / "shared";
  std::filesystem::path path = root / relative;
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return std::nullopt;
  return path.lexically_normal().string();
}

}  // namespace chatflow::testing
