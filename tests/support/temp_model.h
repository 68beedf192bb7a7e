// Random-weight models written by our own writer into a temporary directory, for tests that
// must run without ../shared.
#pragma once

#include <string>

#include "framework/engine/model_writer.h"

namespace chatflow::testing {

// Writes (once per distinct shape in this process) and returns the path.
std::string temp_model(const engine::ModelShape& shape);

// A fresh path in the temporary directory (not created).
std::string temp_path(const std::string& name);

}  // namespace chatflow::testing
