// fp8_cast.cu — the fused FP8 casts (see fp8_cast_kernel.h).
//
// The plain cast: grid-stride loop, 8 elements per thread per iteration when the tensor is
// 16-byte aligned (one 16- or 32-byte load, one 8-byte store), a scalar tail;
// each block reduces its amax key in shared memory and issues one atomicMax.
#include <atomic>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "host/runtime/cuda/fp8_cast_kernel.h"
#include "host/runtime/cuda/fp8_cast_math.h"

namespace accel::runtime::cuda_kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kVector = 8;

__device__ inline float load(const float* p, int64_t i) { return p[i]; }
__device__ inline float load(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ inline float load(const __half* p, int64_t i) { return __half2float(p[i]); }

template <__nv_fp8_interpretation_t kFormat>
__device__ inline __nv_fp8_storage_t to_fp8(float v) {
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, kFormat);
}

template <typename In, __nv_fp8_interpretation_t kFormat>
__global__ void __launch_bounds__(kThreads) fp8_cast_kernel(const In* __restrict__ input,
                                                             __nv_fp8_storage_t* __restrict__ output, int64_t count,
                                                             const float* __restrict__ scale_ptr,
                                                             unsigned int* __restrict__ amax_key_ptr, float limit) {
  const float scale = scale_ptr != nullptr ? *scale_ptr : 1.0f;
  uint32_t key = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool aligned = (reinterpret_cast<uintptr_t>(input) % 16 == 0) && (reinterpret_cast<uintptr_t>(output) % 8 == 0);
  const int64_t vectors = aligned ? count / kVector : 0;
  for (int64_t v = first; v < vectors; v += stride) {
    const int64_t base = v * kVector;
    float x[kVector];
#pragma unroll
    for (int j = 0; j < kVector; ++j) x[j] = load(input, base + j);
    union {
      __nv_fp8_storage_t b[kVector];
      uint2 word;
    } packed;
#pragma unroll
    for (int j = 0; j < kVector; ++j) {
      key = max(key, cuda_math::amax_key(x[j]));
      packed.b[j] = to_fp8<kFormat>(cuda_math::saturate_scaled(x[j], scale, limit));
    }
    *reinterpret_cast<uint2*>(output + base) = packed.word;
  }
  for (int64_t i = vectors * kVector + first; i < count; i += stride) {
    const float x = load(input, i);
    key = max(key, cuda_math::amax_key(x));
    output[i] = to_fp8<kFormat>(cuda_math::saturate_scaled(x, scale, limit));
  }
  if (amax_key_ptr == nullptr) return;
  __shared__ uint32_t block_key[kThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) key = max(key, __shfl_down_sync(0xffffffffu, key, offset));
  if (threadIdx.x % 32 == 0) block_key[threadIdx.x / 32] = key;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) key = max(key, block_key[w]);
    atomicMax(amax_key_ptr, key);
  }
}

// The transposing cast works on kTile x kTile tiles: a block of 32 x 8
// threads reads a tile row-major (each thread two adjacent columns, so a
// warp reads 64 consecutive elements), stores the row-major codes, stages
// them in shared memory and writes the transposed tile, again two
// adjacent bytes per thread. Blocks loop over tiles, so the amax costs one
// atomicMax per block, not per tile. Tiles that are partial or whose
// rows or columns are odd take the element-wise path with bounds checks.
constexpr int kTile = 64;
constexpr int kTileThreadsX = 32;
constexpr int kTileThreadsY = 8;

__device__ inline void load2(const float* p, float& a, float& b) {
  const float2 v = *reinterpret_cast<const float2*>(p);
  a = v.x, b = v.y;
}
__device__ inline void load2(const __nv_bfloat16* p, float& a, float& b) {
  const __nv_bfloat162 v = *reinterpret_cast<const __nv_bfloat162*>(p);
  a = __low2float(v), b = __high2float(v);
}
__device__ inline void load2(const __half* p, float& a, float& b) {
  const __half2 v = *reinterpret_cast<const __half2*>(p);
  a = __low2float(v), b = __high2float(v);
}

__device__ inline uint16_t pair(__nv_fp8_storage_t low, __nv_fp8_storage_t high) {
  return static_cast<uint16_t>(low) | static_cast<uint16_t>(static_cast<uint16_t>(high) << 8);
}

template <typename In, __nv_fp8_interpretation_t kFormat>
__global__ void __launch_bounds__(kTileThreadsX* kTileThreadsY)
    fp8_cast_transpose_kernel(const In* __restrict__ input, __nv_fp8_storage_t* __restrict__ output,
                              __nv_fp8_storage_t* __restrict__ transposed, int64_t rows, int64_t cols,
                              const float* __restrict__ scale_ptr, unsigned int* __restrict__ amax_key_ptr,
                              float limit) {
  __shared__ __nv_fp8_storage_t tile[kTile][kTile + 4];
  const float scale = scale_ptr != nullptr ? *scale_ptr : 1.0f;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t tile_rows = (rows + kTile - 1) / kTile, tile_cols = (cols + kTile - 1) / kTile;
  // Paired loads and stores need even element offsets on aligned bases (a
  // weight may be a view at any offset of its unit's flat buffer).
  const bool even = rows % 2 == 0 && cols % 2 == 0 && reinterpret_cast<uintptr_t>(input) % (2 * sizeof(In)) == 0 &&
                    reinterpret_cast<uintptr_t>(output) % 2 == 0 && reinterpret_cast<uintptr_t>(transposed) % 2 == 0;
  uint32_t key = 0;
  for (int64_t t = blockIdx.x; t < tile_rows * tile_cols; t += gridDim.x) {
    const int64_t row0 = t / tile_cols * kTile, col0 = t % tile_cols * kTile;
    const bool full = even && row0 + kTile <= rows && col0 + kTile <= cols;
    if (full) {
      for (int r = ty; r < kTile; r += kTileThreadsY) {
        const int64_t at = (row0 + r) * cols + col0 + 2 * tx;
        float a, b;
        load2(input + at, a, b);
        key = max(key, max(cuda_math::amax_key(a), cuda_math::amax_key(b)));
        const __nv_fp8_storage_t ca = to_fp8<kFormat>(cuda_math::saturate_scaled(a, scale, limit));
        const __nv_fp8_storage_t cb = to_fp8<kFormat>(cuda_math::saturate_scaled(b, scale, limit));
        if (output != nullptr) *reinterpret_cast<uint16_t*>(output + at) = pair(ca, cb);
        tile[r][2 * tx] = ca;
        tile[r][2 * tx + 1] = cb;
      }
      __syncthreads();
      for (int c = ty; c < kTile; c += kTileThreadsY) {
        *reinterpret_cast<uint16_t*>(transposed + (col0 + c) * rows + row0 + 2 * tx) =
            pair(tile[2 * tx][c], tile[2 * tx + 1][c]);
      }
    } else {
      for (int r = ty; r < kTile; r += kTileThreadsY) {
        for (int j = 0; j < 2; ++j) {
          const int c = 2 * tx + j;
          if (row0 + r >= rows || col0 + c >= cols) continue;
          const int64_t at = (row0 + r) * cols + col0 + c;
          const float x = load(input, at);
          key = max(key, cuda_math::amax_key(x));
          const __nv_fp8_storage_t code = to_fp8<kFormat>(cuda_math::saturate_scaled(x, scale, limit));
          if (output != nullptr) output[at] = code;
          tile[r][c] = code;
        }
      }
      __syncthreads();
      for (int c = ty; c < kTile; c += kTileThreadsY) {
        for (int j = 0; j < 2; ++j) {
          const int r = 2 * tx + j;
          if (row0 + r >= rows || col0 + c >= cols) continue;
          transposed[(col0 + c) * rows + row0 + r] = tile[r][c];
        }
      }
    }
    __syncthreads();  // the next tile overwrites the shared one
  }
  if (amax_key_ptr == nullptr) return;
  constexpr int kWarps = kTileThreadsX * kTileThreadsY / 32;
  __shared__ uint32_t block_key[kWarps];
  for (int offset = 16; offset > 0; offset /= 2) key = max(key, __shfl_down_sync(0xffffffffu, key, offset));
  const int thread = ty * kTileThreadsX + tx;
  if (thread % 32 == 0) block_key[thread / 32] = key;
  __syncthreads();
  if (thread == 0) {
    for (int w = 1; w < kWarps; ++w) key = max(key, block_key[w]);
    atomicMax(amax_key_ptr, key);
  }
}

// The current device's multiprocessor count, asked once per device (the
// cast runs per linear per step; the attribute does not change).
int multiprocessors() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices] = {};
  int device = 0;
  cudaGetDevice(&device);
  if (device < 0 || device >= kMaxDevices) return 132;
  if (cached[device].load(std::memory_order_relaxed) == 0) {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    cached[device].store(sms > 0 ? sms : 1, std::memory_order_relaxed);
  }
  return cached[device].load(std::memory_order_relaxed);
}

template <typename In>
cudaError_t launch_typed(const void* input, void* output, CastTarget target, int64_t count, const float* scale,
                         float* amax, cudaStream_t stream) {
  const int sms = multiprocessors();
  const int64_t wanted = (count / kVector + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < 1 ? 1 : (wanted > 8LL * sms ? 8LL * sms : wanted));
  const auto* in = static_cast<const In*>(input);
  auto* out = static_cast<__nv_fp8_storage_t*>(output);
  // The amax cell holds a non-negative float, whose bits order as integers.
  auto* key = reinterpret_cast<unsigned int*>(amax);
  if (target == CastTarget::e4m3fn) {
    fp8_cast_kernel<In, __NV_E4M3><<<blocks, kThreads, 0, stream>>>(in, out, count, scale, key, 448.0f);
  } else {
    fp8_cast_kernel<In, __NV_E5M2><<<blocks, kThreads, 0, stream>>>(in, out, count, scale, key, 57344.0f);
  }
  return cudaGetLastError();
}

template <typename In>
cudaError_t launch_transpose_typed(const void* input, void* output, void* transposed, CastTarget target, int64_t rows,
                                   int64_t cols, const float* scale, float* amax, cudaStream_t stream) {
  const int64_t tiles = ((rows + kTile - 1) / kTile) * ((cols + kTile - 1) / kTile);
  const int64_t most = 8LL * multiprocessors();
  const int blocks = static_cast<int>(tiles < most ? tiles : most);
  const dim3 threads(kTileThreadsX, kTileThreadsY);
  const auto* in = static_cast<const In*>(input);
  auto* out = static_cast<__nv_fp8_storage_t*>(output);
  auto* out_t = static_cast<__nv_fp8_storage_t*>(transposed);
  auto* key = reinterpret_cast<unsigned int*>(amax);
  if (target == CastTarget::e4m3fn) {
    fp8_cast_transpose_kernel<In, __NV_E4M3><<<blocks, threads, 0, stream>>>(in, out, out_t, rows, cols, scale, key,
                                                                               448.0f);
  } else {
    fp8_cast_transpose_kernel<In, __NV_E5M2><<<blocks, threads, 0, stream>>>(in, out, out_t, rows, cols, scale, key,
                                                                               57344.0f);
  }
  return cudaGetLastError();
}

}  // namespace

const char* launch_fp8_cast_transpose(const void* input, CastSource source, void* output, void* transposed,
                                      CastTarget target, int64_t rows, int64_t cols, const float* scale, float* amax,
                                      void* stream) {
  if (rows <= 0 || cols <= 0) return nullptr;
  const auto s = static_cast<cudaStream_t>(stream);
  cudaError_t status = cudaSuccess;
  switch (source) {
    case CastSource::f32:
      status = launch_transpose_typed<float>(input, output, transposed, target, rows, cols, scale, amax, s);
      break;
    case CastSource::bf16:
      status = launch_transpose_typed<__nv_bfloat16>(input, output, transposed, target, rows, cols, scale, amax, s);
      break;
    case CastSource::f16:
      status = launch_transpose_typed<__half>(input, output, transposed, target, rows, cols, scale, amax, s);
      break;
  }
  return status == cudaSuccess ? nullptr : cudaGetErrorString(status);
}

const char* launch_fp8_cast(const void* input, CastSource source, void* output, CastTarget target, int64_t count,
                            const float* scale, float* amax, void* stream) {
  if (count <= 0) return nullptr;
  const auto s = static_cast<cudaStream_t>(stream);
  cudaError_t status = cudaSuccess;
  switch (source) {
    case CastSource::f32: status = launch_typed<float>(input, output, target, count, scale, amax, s); break;
    case CastSource::bf16: status = launch_typed<__nv_bfloat16>(input, output, target, count, scale, amax, s); break;
    case CastSource::f16: status = launch_typed<__half>(input, output, target, count, scale, amax, s); break;
  }
  return status == cudaSuccess ? nullptr : cudaGetErrorString(status);
}

int compute_capability(int device, const char** error) {
  int major = 0, minor = 0;
  cudaError_t status = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (status == cudaSuccess) status = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (status != cudaSuccess) {
    if (error != nullptr) *error = cudaGetErrorString(status);
    return -1;
  }
  return major * 10 + minor;
}

}  // namespace accel::runtime::cuda_kernels
