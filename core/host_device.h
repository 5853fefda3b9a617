// ZR_HOST_DEVICE marks inline functions that are compiled for the host and, under nvcc, for CUDA
// devices too (index math, Philox), so both sides run the same source.
#pragma once

#if defined(__CUDACC__)
#define ZR_HOST_DEVICE __host__ __device__
#else
#define ZR_HOST_DEVICE
#endif
