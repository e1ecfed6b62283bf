// fused_ops.cu — the model's fused kernels (see fused_ops_kernel.h).
//
// Norms and the cross-entropy take one block per row (a grid-stride loop
// over rows); a norm's row stays in registers between its passes, at most
// kPerThread elements a thread, and its tensors' types are read at run
// time (load_as); the other kernels are instantiated per type. The norm backward's blocks each keep their
// rows' weight and bias sums and write them once, as partial rows the caller
// sums. SwiGLU and rotary are element-wise grid-stride loops. Every value is
// loaded to fp32, computed by fused_ops_math.h and rounded once on store.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "host/model/cuda/fused_ops_kernel.h"
#include "host/model/cuda/fused_ops_math.h"

namespace accel::runtime::cuda_kernels {
namespace {

namespace math = cuda_math;

constexpr int kMaxNormThreads = 512;
constexpr int kPerThread = static_cast<int>(kMaxNormCols / kMaxNormThreads);
constexpr int kElementThreads = 256;
constexpr int kRowThreads = 1024;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ inline float load(const float* p, int64_t i) { return p[i]; }
__device__ inline float load(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ inline float load(const __half* p, int64_t i) { return __half2float(p[i]); }
__device__ inline void store(float* p, int64_t i, float v) { p[i] = v; }
__device__ inline void store(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }
__device__ inline void store(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }

template <typename T>
struct Tag {
  using type = T;
};

// Calls f(Tag<T>{}) with the C++ type that `storage` names.
template <typename F>
const char* with_type(Storage storage, F&& f) {
  switch (storage) {
    case Storage::f32: return f(Tag<float>{});
    case Storage::bf16: return f(Tag<__nv_bfloat16>{});
    case Storage::f16: return f(Tag<__half>{});
  }
  return "unknown storage type";
}

const char* launched() {
  const cudaError_t error = cudaGetLastError();
  return error == cudaSuccess ? nullptr : cudaGetErrorString(error);
}

cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

int grid_for(int64_t items, int threads) {
  const int64_t blocks = (items + threads - 1) / threads;
  return static_cast<int>(std::min<int64_t>(std::max<int64_t>(blocks, 1), 65535LL * 16));
}

// A multiple of 32 (whole warps for the shuffles), 128 to 512, with at
// most kPerThread elements of a row per thread.
int norm_threads(int64_t cols) {
  int64_t threads = (cols + kPerThread - 1) / kPerThread;
  threads = (threads + 31) / 32 * 32;
  return static_cast<int>(std::clamp<int64_t>(threads, 128, kMaxNormThreads));
}

// The sum over the block, on every thread. `shared` holds 32 floats; the
// first barrier lets an earlier call's readers finish before it is reused.
__device__ float block_sum(float v, float* shared) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float total = lane < static_cast<int>(blockDim.x / 32) ? shared[lane] : 0.0f;
  for (int offset = 16; offset > 0; offset >>= 1) total += __shfl_xor_sync(kFullMask, total, offset);
  return total;
}

// The softmax normaliser over the block, on every thread (softmax_merge is
// symmetric, so both sides of each shuffle agree to the bit).
__device__ math::SoftmaxRunning block_softmax(math::SoftmaxRunning r, float* shared_max, float* shared_sum) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const math::SoftmaxRunning other{__shfl_xor_sync(kFullMask, r.max, offset),
                                     __shfl_xor_sync(kFullMask, r.sum, offset)};
    r = math::softmax_merge(r, other);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) {
    shared_max[warp] = r.max;
    shared_sum[warp] = r.sum;
  }
  __syncthreads();
  const bool holds = lane < static_cast<int>(blockDim.x / 32);
  math::SoftmaxRunning total{holds ? shared_max[lane] : 0.0f, holds ? shared_sum[lane] : 0.0f};
  for (int offset = 16; offset > 0; offset >>= 1) {
    const math::SoftmaxRunning other{__shfl_xor_sync(kFullMask, total.max, offset),
                                     __shfl_xor_sync(kFullMask, total.sum, offset)};
    total = math::softmax_merge(total, other);
  }
  return total;
}

// The norms' tensors come in several types at once (an fp32 or bf16
// stream, weights in either, a delta and an output in any): loads and
// stores switch on the type at run time, a branch every thread of the
// launch takes the same way, rather than an instantiation per combination.
__device__ inline float load_as(const void* p, Storage type, int64_t i) {
  switch (type) {
    case Storage::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case Storage::f16: return __half2float(static_cast<const __half*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

__device__ inline void store_as(void* p, Storage type, int64_t i, float v) {
  switch (type) {
    case Storage::bf16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); return;
    case Storage::f16: static_cast<__half*>(p)[i] = __float2half_rn(v); return;
    default: static_cast<float*>(p)[i] = v; return;
  }
}

// v as `type` holds it (rounded to nearest even).
__device__ inline float rounded_as(Storage type, float v) {
  switch (type) {
    case Storage::bf16: return __bfloat162float(__float2bfloat16_rn(v));
    case Storage::f16: return __half2float(__float2half_rn(v));
    default: return v;
  }
}

__global__ void __launch_bounds__(kMaxNormThreads) norm_forward_kernel(NormForward a) {
  __shared__ float shared[32];
  const float cols = static_cast<float>(a.cols);
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const int64_t base = row * a.cols;
    float v[kPerThread];
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      v[k] = 0.0f;
      if (j < a.cols) {
        v[k] = load_as(a.input, a.input_type, base + j);
        if (a.delta != nullptr) {
          v[k] = rounded_as(a.input_type, v[k] + load_as(a.delta, a.delta_type, base + j));
          store_as(a.sum, a.input_type, base + j, v[k]);
        }
        sum += v[k];
      }
    }
    const float mean = a.centred ? block_sum(sum, shared) / cols : 0.0f;
    float squares = 0.0f;
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      if (j < a.cols) squares += (v[k] - mean) * (v[k] - mean);
    }
    const float rstd = math::norm_rstd(block_sum(squares, shared), a.cols, a.eps);
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      if (j < a.cols) {
        const float b = a.bias != nullptr ? load_as(a.bias, a.weight_type, j) : 0.0f;
        store_as(a.output, a.output_type, base + j,
                 load_as(a.weight, a.weight_type, j) * math::normalized(v[k], mean, rstd) + b);
      }
    }
    if (threadIdx.x == 0) {
      a.stats[2 * row] = mean;
      a.stats[2 * row + 1] = rstd;
    }
  }
}

__global__ void __launch_bounds__(kMaxNormThreads) norm_backward_kernel(NormBackward a) {
  __shared__ float shared[32];
  const float cols = static_cast<float>(a.cols);
  float weight_sum[kPerThread], bias_sum[kPerThread];
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) weight_sum[k] = bias_sum[k] = 0.0f;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const int64_t base = row * a.cols;
    const float mean = a.stats[2 * row], rstd = a.stats[2 * row + 1];
    float g[kPerThread], n[kPerThread];
    float sum_g = 0.0f, sum_gn = 0.0f;
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      g[k] = n[k] = 0.0f;
      if (j < a.cols) {
        const float dy = a.grad_output != nullptr ? load_as(a.grad_output, a.grad_type, base + j) : 0.0f;
        n[k] = math::normalized(load_as(a.normed_input, a.input_type, base + j), mean, rstd);
        g[k] = dy * load_as(a.weight, a.weight_type, j);
        sum_g += g[k];
        sum_gn += g[k] * n[k];
        weight_sum[k] += dy * n[k];
        bias_sum[k] += dy;
      }
    }
    const float mean_g = a.centred ? block_sum(sum_g, shared) / cols : 0.0f;
    const float mean_gn = block_sum(sum_gn, shared) / cols;
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      if (j < a.cols) {
        const float other = a.grad_sum != nullptr ? load_as(a.grad_sum, a.input_type, base + j) : 0.0f;
        store_as(a.grad_input, a.input_type, base + j,
                 math::norm_input_grad(g[k], n[k], rstd, mean_g, mean_gn, a.centred) + other);
      }
    }
  }
  const int64_t partial = static_cast<int64_t>(blockIdx.x) * a.cols;
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t j = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (j < a.cols) {
      a.weight_partials[partial + j] = weight_sum[k];
      if (a.bias_partials != nullptr) a.bias_partials[partial + j] = bias_sum[k];
    }
  }
}

template <typename T>
__global__ void swiglu_forward_kernel(SwigluForward a) {
  const auto* gate = static_cast<const T*>(a.gate);
  const auto* up = static_cast<const T*>(a.up);
  auto* out = static_cast<T*>(a.output);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.count; i += stride) {
    store(out, i, math::swiglu(load(gate, i), load(up, i)));
  }
}

template <typename T>
__global__ void swiglu_backward_kernel(SwigluBackward a) {
  const auto* grad = static_cast<const T*>(a.grad_output);
  const auto* gate = static_cast<const T*>(a.gate);
  const auto* up = static_cast<const T*>(a.up);
  auto* grad_gate = static_cast<T*>(a.grad_gate);
  auto* grad_up = static_cast<T*>(a.grad_up);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.count; i += stride) {
    const math::SwigluGrads grads = math::swiglu_grads(load(grad, i), load(gate, i), load(up, i));
    store(grad_gate, i, grads.gate);
    store(grad_up, i, grads.up);
  }
}

template <typename T>
__global__ void rotary_kernel(Rotary a) {
  const auto* in = static_cast<const T*>(a.input);
  auto* out = static_cast<T*>(a.output);
  const int64_t D = a.head_dim, half = D / 2, per_position = a.vectors * D;
  const int64_t count = a.positions * per_position;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < count; idx += stride) {
    const int64_t t = idx / per_position, i = idx % D;
    const bool first = i < half;
    const int64_t partner = first ? i + half : i - half;
    const float x = load(in, idx), px = load(in, idx - i + partner);
    const float* c = a.cos + t * D;
    const float* s = a.sin + t * D;
    store(out, idx, a.backward ? math::rotary_grad(x, px, c[i], s[partner], first)
                               : math::rotary(x, px, c[i], s[i], first));
  }
}

// Launched with kRowThreads (1024) threads: the bound tells the compiler,
// which otherwise may use more registers than a block that size can have.
template <typename T>
__global__ void __launch_bounds__(kRowThreads) cross_entropy_kernel(CrossEntropy a) {
  __shared__ float shared_max[32], shared_sum[32];
  const auto* logits = static_cast<const T*>(a.logits);
  auto* grad = static_cast<T*>(a.grad);
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T* in = logits + row * a.row_stride;
    math::SoftmaxRunning running{0.0f, 0.0f};
    for (int64_t j = threadIdx.x; j < a.cols; j += blockDim.x) running = math::softmax_add(running, load(in, j));
    running = block_softmax(running, shared_max, shared_sum);
    const int64_t label = a.labels[row];
    const bool known = label >= 0 && label < a.cols;  // else NaN, never a read out of the row
    if (threadIdx.x == 0) {
      a.row_losses[row] = known ? math::cross_entropy_loss(running, load(in, label)) : NAN;
    }
    T* out = grad + row * a.cols;
    for (int64_t j = threadIdx.x; j < a.cols; j += blockDim.x) {
      store(out, j, math::cross_entropy_grad(load(in, j), running, j == label, a.factor));
    }
  }
}

}  // namespace

const char* launch_norm_forward(const NormForward& args, void* stream) {
  if (args.rows == 0) return nullptr;
  if (args.cols < 1 || args.cols > kMaxNormCols) return "norm: the row width is outside 1..8192";
  const int grid = static_cast<int>(std::min<int64_t>(args.rows, 65535LL * 16));
  norm_forward_kernel<<<grid, norm_threads(args.cols), 0, as_stream(stream)>>>(args);
  return launched();
}

const char* launch_norm_backward(const NormBackward& args, void* stream) {
  if (args.cols < 1 || args.cols > kMaxNormCols) return "norm: the row width is outside 1..8192";
  if (args.partial_rows < 1) return "norm: no partial rows";
  norm_backward_kernel<<<static_cast<int>(args.partial_rows), norm_threads(args.cols), 0, as_stream(stream)>>>(args);
  return launched();
}

const char* launch_swiglu_forward(const SwigluForward& args, void* stream) {
  if (args.count == 0) return nullptr;
  return with_type(args.type, [&](auto tag) {
    swiglu_forward_kernel<typename decltype(tag)::type>
        <<<grid_for(args.count, kElementThreads), kElementThreads, 0, as_stream(stream)>>>(args);
    return launched();
  });
}

const char* launch_swiglu_backward(const SwigluBackward& args, void* stream) {
  if (args.count == 0) return nullptr;
  return with_type(args.type, [&](auto tag) {
    swiglu_backward_kernel<typename decltype(tag)::type>
        <<<grid_for(args.count, kElementThreads), kElementThreads, 0, as_stream(stream)>>>(args);
    return launched();
  });
}

const char* launch_rotary(const Rotary& args, void* stream) {
  const int64_t count = args.positions * args.vectors * args.head_dim;
  if (count == 0) return nullptr;
  if (args.head_dim % 2 != 0) return "rotary: the head dimension is odd";
  return with_type(args.type, [&](auto tag) {
    rotary_kernel<typename decltype(tag)::type>
        <<<grid_for(count, kElementThreads), kElementThreads, 0, as_stream(stream)>>>(args);
    return launched();
  });
}

const char* launch_cross_entropy(const CrossEntropy& args, void* stream) {
  if (args.rows == 0) return nullptr;
  const int grid = static_cast<int>(std::min<int64_t>(args.rows, 65535LL * 16));
  return with_type(args.type, [&](auto tag) {
    cross_entropy_kernel<typename decltype(tag)::type><<<grid, kRowThreads, 0, as_stream(stream)>>>(args);
    return launched();
  });
}

bool kernels_run_on_current_device() {
  cudaFuncAttributes attributes{};
  const bool runs = cudaFuncGetAttributes(&attributes, swiglu_forward_kernel<float>) == cudaSuccess;
  cudaGetLastError();  // a missing image is an answer here, not an error to leave for the next launch
  return runs;
}

int64_t norm_backward_blocks(int64_t rows) {
  int device = 0, processors = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&processors, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    cudaGetLastError();  // cleared: the caller still gets a working count
    processors = 32;
  }
  return std::max<int64_t>(1, std::min<int64_t>(rows, 4LL * processors));
}

}  // namespace accel::runtime::cuda_kernels
