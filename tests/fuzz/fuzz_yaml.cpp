// libFuzzer target: arbitrary bytes as each kind of YAML file chatflow reads — a pipeline
// (checked against every built-in stage type), a keys file, any document. Every outcome must be
// a tree or a list of located errors: never a crash, a hang, or memory without bound (aliases
// that repeat or contain themselves included).
#include <cstdint>
#include <string>

#include "framework/api/registry.h"
#include "framework/loading/pipeline_spec.h"
#include "framework/security/key_store.h"
#include "framework/text/yaml_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chatflow;
  std::string text(reinterpret_cast<const char*>(data), size);
  {
    Diagnostics diagnostics;
    ConfigValue root = read_yaml_text(text, "fuzz.yaml", diagnostics);
    for (const auto& error : diagnostics.errors()) {
      if (error.where.file != "fuzz.yaml") __builtin_trap();
    }
  }
  {
    Diagnostics diagnostics;
    auto spec = parse_pipeline_yaml(text, "fuzz.yaml", builtin_registry(), diagnostics);
    // A spec comes back exactly when no error was reported.
    if (spec.has_value() != diagnostics.empty()) __builtin_trap();
  }
  {
    Diagnostics diagnostics;
    auto keys = security::KeyStore::parse(text, "keys.yaml", diagnostics);
    if (keys.has_value() != diagnostics.empty()) __builtin_trap();
  }
  return 0;
}
