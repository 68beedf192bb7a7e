// Where a model is found when none is named (`path: auto`, `scripts/quickstart.sh run`):
// $CHATFLOW_MODEL, then models/stories260K.gguf or the first .gguf in models/ of the working
// directory, then ../shared/models/stories260K/stories260K.gguf.
#pragma once

#include <optional>
#include <string>

namespace chatflow::engine {

// Nullopt when none exists.
std::optional<std::string> find_default_model();

}  // namespace chatflow::engine
