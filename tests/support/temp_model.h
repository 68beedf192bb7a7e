// Random-weight models written by our own writer into a temporary directory, for tests that
// must run without ../shared.
#pragma once

#include <functional>
#include <string>

#include "framework/engine/gguf_file.h"
#include "framework/engine/gguf_writer.h"
#include "framework/engine/model_writer.h"

namespace chatflow::testing {

// Writes (once per distinct shape in this process) and returns the path.
std::string temp_model(const engine::ModelShape& shape);

// The GGUF at `source` copied to temp_path(name) without `drop_tensor` and `drop_key`, then
// `edit` applied to the copy before it is written (it may add or replace keys and tensors).
std::string rewritten_model(
    const std::string& source, const std::string& name,
    const std::function<void(engine::GgufWriter&, const engine::GgufFile&)>& edit,
    const std::string& drop_tensor = "", const std::string& drop_key = "");

// A fresh path in the temporary directory (not created).
std::string temp_path(const std::string& name);

// temp_path with nothing there yet (a database's -wal, -shm and -journal files removed too), so a
// test starts from an empty file however often it runs in one process.
std::string fresh_path(const std::string& name);

// Writes `text` to temp_path(name) and returns the path.
std::string write_temp_file(const std::string& name, const std::string& text);

}  // namespace chatflow::testing
