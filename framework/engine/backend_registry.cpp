// The backends this build has, and what to say about those it has not. The one file compiled
// with chatflow_cuda's definitions (framework/CMakeLists.txt).
#include <stdexcept>
#include <string>

#include "framework/engine/backend.h"
#include "framework/engine/cpu/cpu_backend.h"

namespace chatflow::engine {

bool built_with_cuda() {
#ifdef CHATFLOW_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

std::vector<std::string> backend_names() {
  return {"cpu"};  // "cuda" first, once its backend exists (issue 35)
}

std::string missing_backend_message(std::string_view name, bool built_with_cuda) {
  if (name != "cuda") return {};
  if (built_with_cuda) {
    return "this chatflow was built with CUDA (chatflow_cuda), but this version has no CUDA "
           "backend yet: use backend: cpu or auto";
  }
  return "this chatflow was built without CUDA: rebuild with -DCHATFLOW_CUDA=ON on a machine "
         "with the CUDA Toolkit (nvcc), or use backend: cpu or auto";
}

std::optional<std::string> backend_unavailable(std::string_view name) {
  if (name == "cpu" || name == "auto") return std::nullopt;
  if (name == "cuda") return missing_backend_message(name, built_with_cuda());
  return "unknown backend '" + std::string(name) + "' (known: auto, cpu, cuda)";
}

std::unique_ptr<Backend> make_backend(std::string_view name, std::shared_ptr<const Model> model,
                                      const BackendOptions& options) {
  if (auto reason = backend_unavailable(name)) {
    if (name == "cuda") throw BackendUnavailable(*reason);
    throw std::invalid_argument(*reason);
  }
  return std::make_unique<CpuBackend>(std::move(model), options);
}

}  // namespace chatflow::engine
