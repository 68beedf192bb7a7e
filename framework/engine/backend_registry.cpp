// The backends this build has, and what to say about those it has not.
#include <stdexcept>
#include <string>

#include "framework/engine/backend.h"
#include "framework/engine/cpu/cpu_backend.h"

namespace chatflow::engine {

std::vector<std::string> backend_names() {
  return {"cpu"};
}

std::string missing_backend_message(std::string_view name, bool built_with_cuda) {
  if (name != "cuda") return {};
  if (built_with_cuda) {
    return "this chatflow was built with CUDA (-DCHATFLOW_CUDA), but this version has no CUDA "
           "backend yet: use backend: cpu or auto";
  }
  return "this chatflow was built without CUDA: rebuild with -DCHATFLOW_CUDA=ON on a machine "
         "with the CUDA Toolkit (nvcc), or use backend: cpu or auto";
}

std::unique_ptr<Backend> make_backend(std::string_view name, std::shared_ptr<const Model> model,
                                      const BackendOptions& options) {
  if (name == "cpu" || name == "auto")
    return std::make_unique<CpuBackend>(std::move(model), options);
  if (name == "cuda") {
#ifdef CHATFLOW_HAVE_CUDA
    constexpr bool kBuiltWithCuda = true;
#else
    constexpr bool kBuiltWithCuda = false;
#endif
    throw BackendUnavailable(missing_backend_message(name, kBuiltWithCuda));
  }
  throw std::invalid_argument("unknown backend '" + std::string(name) +
                              "' (known: auto, cpu, cuda)");
}

}  // namespace chatflow::engine
