// fp8_cast_kernel.h — the fused FP8 casts on a CUDA device: one pass over a
// contiguous f32/bf16/f16 tensor that stores x * scale as E4M3FN or E5M2
// (saturating, NaN kept), optionally also transposed, and folds max |x|
// into an fp32 amax cell.
//
// Plain C++ with no CUDA or LibTorch type, so kernel_services.cpp calls it
// without CUDA headers. Built only where CMake finds nvcc
// (ACCEL_HAVE_CUDA_KERNELS); elsewhere the ATen path serves CUDA tensors.
// Thread-safety: any thread; the work is queued on `stream`.
#pragma once

#include <cstdint>

namespace accel::runtime::cuda_kernels {

enum class CastSource : int32_t { f32 = 0, bf16 = 1, f16 = 2 };
enum class CastTarget : int32_t { e4m3fn = 0, e5m2 = 1 };

// Queues the cast of `count` elements of `input` into `output` on `stream`
// (a cudaStream_t). `scale` (device fp32 scalar) may be NULL for 1. `amax`
// (device fp32 scalar) may be NULL; when set, max |x| is folded into it
// (the caller zeroes it first for a fresh amax). Returns NULL, or the CUDA
// error the launch reported (a static string).
const char* launch_fp8_cast(const void* input, CastSource source, void* output, CastTarget target, int64_t count,
                            const float* scale, float* amax, void* stream);

// The same cast of a row-major [rows, cols] `input` that also stores the
// codes transposed into `transposed` ([cols, rows], row-major), in one pass
// through shared-memory tiles. `output` may be NULL (the transpose only).
// Any alignment: tiles take paired loads and stores when rows and cols are
// even and the pointers allow it, the element-wise path otherwise.
const char* launch_fp8_cast_transpose(const void* input, CastSource source, void* output, void* transposed,
                                      CastTarget target, int64_t rows, int64_t cols, const float* scale, float* amax,
                                      void* stream);

// The compute capability of `device` as major * 10 + minor (90 for an H100),
// or -1 with `error` set when the runtime cannot say.
int compute_capability(int device, const char** error);

}  // namespace accel::runtime::cuda_kernels
