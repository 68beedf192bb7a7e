// cuBLAS, loaded when the CUDA backend first starts rather than linked: libcublasLt alone maps
// ~215 MiB and costs ~0.1 s at every process start, which every chatflow command would pay on a
// machine without a GPU. For the .cu files only (it includes cuBLAS's header for its types).
#pragma once

#include <cublas_v2.h>

namespace chatflow::kernels::cuda {

struct BlasLibrary {
  cublasStatus_t (*create)(cublasHandle_t*);
  cublasStatus_t (*destroy)(cublasHandle_t);
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
  cublasStatus_t (*set_math_mode)(cublasHandle_t, cublasMath_t);
  cublasStatus_t (*set_workspace)(cublasHandle_t, void*, size_t);
  cublasStatus_t (*sgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                          const float*, const float*, int, const float*, int, const float*, float*,
                          int);
};

// Loads libcublas.so.<major of the toolkit built against> once (the toolkit's library folder
// first, then the loader's search path); throws DeviceError naming what is missing.
const BlasLibrary& blas_library();

}  // namespace chatflow::kernels::cuda
