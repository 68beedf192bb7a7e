#include <cuda_runtime.h>
#include <dlfcn.h>
#include <mutex>
#include <string>

#include "kernels/cuda/blas_library.h"
#include "kernels/cuda/device_runtime.h"

namespace chatflow::kernels::cuda {
namespace {

void check(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // reported here, not left for the next call
  throw DeviceError(std::string(call) + " failed: " + cudaGetErrorString(status));
}

std::string mib(size_t bytes) {
  return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB";
}

template <typename Function>
void resolve(void* library, const char* name, Function& function) {
  function = reinterpret_cast<Function>(dlsym(library, name));
  if (function == nullptr) throw DeviceError(std::string("libcublas has no ") + name);
}

}  // namespace

const BlasLibrary& blas_library() {
  static BlasLibrary library{};
  static std::once_flag loaded;
  static std::string failure;
  std::call_once(loaded, [] {
    const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    void* handle = dlopen((std::string(CHATFLOW_CUDA_LIBRARY_DIR) + "/" + name).c_str(),
                          RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      failure = "cannot load " + name + " (cuBLAS, from the CUDA Toolkit): " + dlerror();
      return;
    }
    try {
      resolve(handle, "cublasCreate_v2", library.create);
      resolve(handle, "cublasDestroy_v2", library.destroy);
      resolve(handle, "cublasSetStream_v2", library.set_stream);
      resolve(handle, "cublasSetMathMode", library.set_math_mode);
      resolve(handle, "cublasSetWorkspace_v2", library.set_workspace);
      resolve(handle, "cublasSgemm_v2", library.sgemm);
    } catch (const DeviceError& error) {
      failure = error.what();
    }
  });
  if (!failure.empty()) throw DeviceError(failure);
  return library;
}

// cuBLAS's workspace, given to it once: a product captured into a CUDA graph must not allocate.
constexpr size_t kBlasWorkspaceBytes = size_t{32} << 20;

struct DeviceContext::State {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  void* blas_workspace = nullptr;
};

DeviceContext::DeviceContext() : state_(std::make_unique<State>()) {
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (count == 0) throw DeviceError("no CUDA device is visible");
  check(cudaSetDevice(0), "cudaSetDevice");
  cudaDeviceProp properties{};
  check(cudaGetDeviceProperties(&properties, 0), "cudaGetDeviceProperties");
  name_ = properties.name;
  compute_capability_ = properties.major * 10 + properties.minor;
  check(cudaStreamCreateWithFlags(&state_->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  const BlasLibrary* blas = nullptr;
  try {
    blas = &blas_library();
  } catch (...) {
    cudaStreamDestroy(state_->stream);
    throw;
  }
  if (blas->create(&state_->blas) != CUBLAS_STATUS_SUCCESS) {
    cudaStreamDestroy(state_->stream);
    throw DeviceError("cublasCreate failed");
  }
  blas->set_stream(state_->blas, state_->stream);
  // Products stay in IEEE float (no TF32): the backend's results follow the CPU's within the
  // conformance suite's float tolerances.
  blas->set_math_mode(state_->blas, CUBLAS_DEFAULT_MATH);
  if (cudaMalloc(&state_->blas_workspace, kBlasWorkspaceBytes) != cudaSuccess ||
      blas->set_workspace(state_->blas, state_->blas_workspace, kBlasWorkspaceBytes) !=
          CUBLAS_STATUS_SUCCESS) {
    cudaGetLastError();
    blas->destroy(state_->blas);
    cudaFree(state_->blas_workspace);
    cudaStreamDestroy(state_->stream);
    throw DeviceError("cannot give cuBLAS its 32 MiB workspace on " + name_);
  }
}

DeviceContext::~DeviceContext() {
  cudaStreamSynchronize(state_->stream);
  blas_library().destroy(state_->blas);
  cudaFree(state_->blas_workspace);
  cudaStreamDestroy(state_->stream);
}

void* DeviceContext::allocate(size_t bytes, const char* what) {
  void* device = nullptr;
  if (cudaMalloc(&device, bytes == 0 ? 1 : bytes) != cudaSuccess) {
    cudaGetLastError();
    throw DeviceOutOfMemory("cannot allocate " + mib(bytes) + " on " + name_ + " for " + what +
                            ": " + mib(free_bytes()) + " of " + mib(total_bytes()) + " free");
  }
  return device;
}

void DeviceContext::release(void* device) noexcept {
  if (device != nullptr) cudaFree(device);
}

void DeviceContext::upload(void* device, const void* host, size_t bytes) {
  check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, state_->stream),
        "cudaMemcpyAsync (to the device)");
  check(cudaStreamSynchronize(state_->stream), "cudaStreamSynchronize");
}

void DeviceContext::download(void* host, const void* device, size_t bytes) {
  check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, state_->stream),
        "cudaMemcpyAsync (to the host)");
  check(cudaStreamSynchronize(state_->stream), "cudaStreamSynchronize");
}

void DeviceContext::copy(void* to_device, const void* from_device, size_t bytes) {
  check(cudaMemcpyAsync(to_device, from_device, bytes, cudaMemcpyDeviceToDevice, state_->stream),
        "cudaMemcpyAsync (on the device)");
}

void DeviceContext::synchronize() {
  check(cudaStreamSynchronize(state_->stream), "a kernel of the step");
}

void DeviceContext::check_launch(const char* kernel) {
  check(cudaGetLastError(), kernel);
}

size_t DeviceContext::free_bytes() const {
  size_t free = 0, total = 0;
  cudaMemGetInfo(&free, &total);
  return free;
}

size_t DeviceContext::total_bytes() const {
  size_t free = 0, total = 0;
  cudaMemGetInfo(&free, &total);
  return total;
}

void DeviceContext::begin_capture() {
  check(cudaStreamBeginCapture(state_->stream, cudaStreamCaptureModeThreadLocal),
        "cudaStreamBeginCapture");
}

void* DeviceContext::end_capture() {
  cudaGraph_t graph = nullptr;
  check(cudaStreamEndCapture(state_->stream, &graph), "cudaStreamEndCapture");
  cudaGraphExec_t executable = nullptr;
  const cudaError_t status = cudaGraphInstantiate(&executable, graph, 0);
  cudaGraphDestroy(graph);
  check(status, "cudaGraphInstantiate");
  return executable;
}

void DeviceContext::abandon_capture() noexcept {
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(state_->stream, &graph) == cudaSuccess && graph != nullptr)
    cudaGraphDestroy(graph);
  cudaGetLastError();
}

void DeviceContext::launch_graph(void* graph) {
  check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), state_->stream), "cudaGraphLaunch");
}

void DeviceContext::destroy_graph(void* graph) noexcept {
  if (graph != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph));
}

void* DeviceContext::stream() const {
  return state_->stream;
}

void* DeviceContext::blas() const {
  return state_->blas;
}

}  // namespace chatflow::kernels::cuda
