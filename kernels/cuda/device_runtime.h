// The CUDA backend's hold on device 0, callable from plain C++ (no CUDA header here): one stream
// and one cuBLAS handle that every launch of transformer_kernels.h goes to, in order, and memory
// that says what failed. Built only where nvcc is found (chatflow_cuda_kernels).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>

namespace chatflow::kernels::cuda {

// A CUDA runtime or cuBLAS call that failed: names the call and the runtime's reason.
class DeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Device memory that is not there, saying how much was asked and how much is free: a
// std::bad_alloc, as the backend contract (framework/engine/backend.h) wants.
class DeviceOutOfMemory : public std::bad_alloc {
 public:
  explicit DeviceOutOfMemory(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

class DeviceContext {
 public:
  // Device 0, a stream of its own and a cuBLAS handle on it. Throws DeviceError without a device.
  DeviceContext();
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  // Throws DeviceOutOfMemory naming `what` the bytes are for.
  void* allocate(size_t bytes, const char* what);
  void release(void* device) noexcept;
  // Host to device, done when it returns (the host buffer may change afterwards).
  void upload(void* device, const void* host, size_t bytes);
  // Device to host after everything launched before it: done when it returns.
  void download(void* host, const void* device, size_t bytes);
  void copy(void* to_device, const void* from_device, size_t bytes);
  // Waits for every launch; throws DeviceError for a kernel that failed.
  void synchronize();
  // Throws DeviceError when the last launch could not start.
  void check_launch(const char* kernel);

  // Stream capture: launches between begin_capture and end_capture are recorded, not run, into
  // a graph (an instantiated cudaGraphExec_t) that launch_graph replays on the stream. Nothing
  // may wait on the stream or allocate while capturing; abandon_capture ends a failed capture.
  void begin_capture();
  void* end_capture();
  void abandon_capture() noexcept;
  void launch_graph(void* graph);
  void destroy_graph(void* graph) noexcept;

  size_t free_bytes() const;
  size_t total_bytes() const;
  const std::string& device_name() const { return name_; }
  int compute_capability() const { return compute_capability_; }

  // The CUDA stream (cudaStream_t) and cuBLAS handle (cublasHandle_t), for the .cu files.
  void* stream() const;
  void* blas() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
  std::string name_;
  int compute_capability_ = 0;
};

// A device array that grows to the largest size asked for and keeps it (a step's workspace).
template <typename T>
class DeviceArray {
 public:
  DeviceArray(DeviceContext& context, const char* what) : context_(&context), what_(what) {}
  ~DeviceArray() { context_->release(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  // At least `count` elements (exactly: the memory plan counts the largest step's sizes); the old
  // contents are not kept when it grows. Waits for every launch first: one may still read the old
  // memory.
  T* reserve(size_t count) {
    if (count > capacity_) {
      if (data_ != nullptr) context_->synchronize();
      context_->release(data_);
      data_ = nullptr;
      capacity_ = 0;
      data_ = static_cast<T*>(context_->allocate(count * sizeof(T), what_));
      capacity_ = count;
    }
    return data_;
  }
  T* data() const { return data_; }
  size_t bytes() const { return capacity_ * sizeof(T); }

 private:
  DeviceContext* context_;
  const char* what_;
  T* data_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace chatflow::kernels::cuda
