#include "framework/engine/default_model.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <vector>

namespace chatflow::engine {

std::optional<std::string> find_default_model() {
  namespace fs = std::filesystem;
  if (const char* configured = std::getenv("CHATFLOW_MODEL");
      configured != nullptr && *configured != '\0') {
    return std::string(configured);
  }
  std::error_code error;
  if (fs::exists("models/stories260K.gguf", error)) return std::string("models/stories260K.gguf");
  if (fs::is_directory("models", error)) {
    std::vector<std::string> found;
    for (const auto& entry : fs::directory_iterator("models", error)) {
      if (entry.path().extension() == ".gguf") found.push_back(entry.path().string());
    }
    if (!found.empty()) {
      std::sort(found.begin(), found.end());
      return found.front();
    }
  }
  if (fs::exists("../shared/models/stories260K/stories260K.gguf", error)) {
    return std::string("../shared/models/stories260K/stories260K.gguf");
  }
  return std::nullopt;
}

}  // namespace chatflow::engine
