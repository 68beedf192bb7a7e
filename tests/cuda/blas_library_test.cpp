// cuBLAS is loaded when the CUDA backend starts, not linked (kernels/cuda/blas_library.h): the
// library and every function the backend calls must be found. Needs no device, so it runs in every
// build with CUDA.
#include <gtest/gtest.h>

#include "kernels/cuda/blas_library.h"

namespace chatflow::kernels::cuda {
namespace {

TEST(CudaBlasLibrary, LoadsWithEveryFunctionTheBackendCalls) {
  const BlasLibrary& library = blas_library();
  EXPECT_NE(library.create, nullptr);
  EXPECT_NE(library.destroy, nullptr);
  EXPECT_NE(library.set_stream, nullptr);
  EXPECT_NE(library.set_math_mode, nullptr);
  EXPECT_NE(library.sgemm, nullptr);
  EXPECT_EQ(&blas_library(), &library);  // loaded once
}

}  // namespace
}  // namespace chatflow::kernels::cuda
