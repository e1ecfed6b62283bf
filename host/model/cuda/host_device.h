// host_device.h — ACCEL_HOST_DEVICE marks a function that the CUDA kernels
// and their CPU references share: __host__ __device__ under nvcc, nothing
// under the host compiler.
#pragma once

#if defined(__CUDACC__)
#define ACCEL_HOST_DEVICE __host__ __device__
#else
#define ACCEL_HOST_DEVICE
#endif
