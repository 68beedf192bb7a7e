// The backends this build has, and what to say about those it has not. The one file compiled
// with chatflow_cuda's definitions (framework/CMakeLists.txt).
#include <iostream>
#include <mutex>
#include <stdexcept>
#include <string>

#include "framework/engine/backend.h"
#include "framework/engine/cpu/cpu_backend.h"
#ifdef CHATFLOW_HAVE_CUDA
#include "framework/engine/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace chatflow::engine {

bool built_with_cuda() {
#ifdef CHATFLOW_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

std::vector<std::string> backend_names() {
  if (built_with_cuda()) return {"cuda", "cpu"};
  return {"cpu"};
}

std::string missing_backend_message(std::string_view name, bool built_with_cuda) {
  if (name != "cuda" || built_with_cuda) return {};
  return "this chatflow was built without CUDA: rebuild with -DCHATFLOW_CUDA=ON on a machine "
         "with the CUDA Toolkit (nvcc), or use backend: cpu or auto";
}

std::optional<std::string> backend_unavailable(std::string_view name) {
  if (name == "cpu" || name == "auto") return std::nullopt;
  if (name != "cuda") return "unknown backend '" + std::string(name) + "' (known: auto, cpu, cuda)";
#ifdef CHATFLOW_HAVE_CUDA
  if (auto missing = cuda_device_missing()) return *missing + ": use backend: cpu or auto";
  return std::nullopt;
#else
  return missing_backend_message(name, false);
#endif
}

#ifdef CHATFLOW_HAVE_CUDA
namespace {

// `backend: auto` says once per process why it computes on the CPU in a build with CUDA.
void report_cpu_fallback(const std::string& reason) {
  static std::once_flag reported;
  std::call_once(reported, [&] {
    std::clog << "chatflow: backend auto: " << reason << "; computing on the CPU\n";
  });
}

}  // namespace
#endif

std::optional<double> measure_device_bandwidth(std::string_view name, std::string& error) {
#ifdef CHATFLOW_HAVE_CUDA
  if (name == "cuda" || name == "auto") {
    if (auto missing = cuda_device_missing()) {
      error = *missing;
      return std::nullopt;
    }
    const double rate = kernels::cuda::measure_read_bandwidth(error);
    if (rate > 0) return rate;
    return std::nullopt;
  }
#endif
  error = "backend " + std::string(name) + " computes in host memory";
  return std::nullopt;
}

std::unique_ptr<Backend> make_backend(std::string_view name, std::shared_ptr<const Model> model,
                                      const BackendOptions& options) {
  const bool requested_auto = name == "auto";
#ifdef CHATFLOW_HAVE_CUDA
  if (name == "auto") {
    if (auto missing = cuda_device_missing()) {
      report_cpu_fallback(*missing);
    } else {
      name = "cuda";
    }
  }
#endif
  if (auto reason = backend_unavailable(name)) {
    if (name == "cuda") throw BackendUnavailable(*reason);
    throw std::invalid_argument(*reason);
  }
#ifdef CHATFLOW_HAVE_CUDA
  if (name == "cuda" && requested_auto) {
    try {
      return make_cuda_backend(model, options);
    } catch (const std::exception& error) {  // a model it cannot hold or run: the CPU can
      report_cpu_fallback(error.what());
      return std::make_unique<CpuBackend>(std::move(model), options);
    }
  }
  if (name == "cuda") return make_cuda_backend(std::move(model), options);
#endif
  return std::make_unique<CpuBackend>(std::move(model), options);
}

}  // namespace chatflow::engine
