// Marks a small inline function the CUDA kernels call on the device as well as the CPU code on the
// host, so both read a block's bits through one definition.
#pragma once

#if defined(__CUDACC__)
#define CHATFLOW_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define CHATFLOW_HOST_DEVICE inline
#endif
