// libFuzzer target: arbitrary bytes as a GGUF file, then as a model. Everything must end in a
// GgufError (or a loaded model), never a crash or an out-of-bounds read.
#include <cstdint>
#include <string_view>

#include "framework/engine/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chatflow::engine;
  try {
    auto file = GgufFile::from_bytes(std::string_view(reinterpret_cast<const char*>(data), size),
                                     "fuzz.gguf");
    auto model = Model::from_file(file);
    // A model that loads must also describe its vocabulary consistently.
    if (model->config().vocabulary < static_cast<int64_t>(model->tokenizer().vocabulary().size()))
      __builtin_trap();
  } catch (const GgufError&) {
  }
  return 0;
}
