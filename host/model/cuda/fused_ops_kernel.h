// fused_ops_kernel.h — the model's fused kernels on a CUDA device: the
// residual add with LayerNorm or RMSNorm, SwiGLU, rotary embeddings and the
// vocabulary cross-entropy, forward and backward, each one pass over memory
// where ATen's composition takes several (fused_ops_math.h has their
// arithmetic).
//
// Plain C++ with no CUDA or LibTorch type, so host/model calls it without
// CUDA headers, and the CPU references (host/model/fused_ops_reference.h)
// take the same argument structs. Built only where CMake finds nvcc
// (ACCEL_HAVE_CUDA_KERNELS). Every pointer is device memory of the current
// device, row-major and contiguous unless a stride says otherwise; the
// caller owns every buffer. Thread-safety: any thread; the work is queued
// on `stream` (a cudaStream_t). Each launcher returns NULL, or the CUDA
// error the launch reported (a static string).
#pragma once

#include <cstdint>

namespace accel::runtime::cuda_kernels {

enum class Storage : int32_t { f32 = 0, bf16 = 1, f16 = 2 };

// The widest row the norm kernels take: each thread keeps its share of a
// row in registers, 16 elements of a block of at most 512 threads (at 128
// registers a thread, the most a 512-thread block may hold).
constexpr int64_t kMaxNormCols = 8192;

// sum = input + delta (when delta is set, rounded to input_type as ATen's
// add rounds it), then LayerNorm (centred) or RMSNorm of each row of the
// sum: output = w * n (+ b) with n = (v - mean) * rstd, rounded once to
// output_type. The residual stream (input, sum) may be fp32 or 16-bit
// (fsdp's bf16 parameters), the weight and bias fp32 or the stream's type.
struct NormForward {
  const void* input = nullptr;  // [rows, cols] in input_type
  Storage input_type = Storage::f32;
  const void* delta = nullptr;  // [rows, cols] in delta_type, or NULL: the norm of input alone
  Storage delta_type = Storage::f32;
  const void* weight = nullptr;  // [cols] in weight_type
  const void* bias = nullptr;    // [cols] in weight_type, or NULL
  Storage weight_type = Storage::f32;
  void* sum = nullptr;     // [rows, cols] in input_type, written when delta is set
  void* output = nullptr;  // [rows, cols] in output_type
  Storage output_type = Storage::f32;
  float* stats = nullptr;  // [rows, 2]: the row's mean (0 for RMSNorm) and rstd
  int64_t rows = 0;
  int64_t cols = 0;  // 1 to kMaxNormCols
  float eps = 1e-5f;
  bool centred = true;  // LayerNorm; false: RMSNorm
};

// The gradient at the normalised rows (the sum, or the input), plus
// grad_sum where the sum has other uses (the residual stream), in the
// stream's type. The weight's and bias's gradients come as per-block fp32
// partial sums over rows, [partial_rows, cols], which the caller sums over
// dim 0.
struct NormBackward {
  const void* grad_output = nullptr;  // [rows, cols] in grad_type, or NULL (zero)
  Storage grad_type = Storage::f32;
  const void* grad_sum = nullptr;      // [rows, cols] in input_type, or NULL
  const void* normed_input = nullptr;  // [rows, cols] in input_type: what the forward normalised
  Storage input_type = Storage::f32;
  const void* weight = nullptr;  // [cols] in weight_type
  Storage weight_type = Storage::f32;
  const float* stats = nullptr;  // the forward's
  void* grad_input = nullptr;    // [rows, cols] in input_type
  float* weight_partials = nullptr;  // [partial_rows, cols]: sums of dy * n
  float* bias_partials = nullptr;    // [partial_rows, cols]: sums of dy, or NULL
  int64_t partial_rows = 1;          // norm_backward_blocks(rows), or fewer
  int64_t rows = 0;
  int64_t cols = 0;
  bool centred = true;
};

// output = silu(gate) * up over `count` elements, all in `type`.
struct SwigluForward {
  const void* gate = nullptr;
  const void* up = nullptr;
  void* output = nullptr;
  Storage type = Storage::f32;
  int64_t count = 0;
};

struct SwigluBackward {
  const void* grad_output = nullptr;
  const void* gate = nullptr;
  const void* up = nullptr;
  void* grad_gate = nullptr;
  void* grad_up = nullptr;
  Storage type = Storage::f32;
  int64_t count = 0;
};

// The rotate_half rotary map (or, with `backward`, its gradient) of
// [positions, vectors, head_dim] rows: vectors = batch x heads at each
// position, cos and sin [positions, head_dim] in fp32.
struct Rotary {
  const void* input = nullptr;
  void* output = nullptr;
  Storage type = Storage::f32;
  const float* cos = nullptr;
  const float* sin = nullptr;
  int64_t positions = 0;
  int64_t vectors = 0;
  int64_t head_dim = 0;  // even
  bool backward = false;
};

// Each row's -log softmax(row)[label] into row_losses, and the gradient
// (softmax - onehot) * factor into grad ([rows, cols] contiguous, in type).
// Rows of logits lie row_stride elements apart (a padded head's view). A
// label outside [0, cols) gives that row a NaN loss.
struct CrossEntropy {
  const void* logits = nullptr;
  Storage type = Storage::f32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;
  const int64_t* labels = nullptr;  // [rows]
  float* row_losses = nullptr;      // [rows]
  void* grad = nullptr;             // [rows, cols] in type
  float factor = 1.0f;
};

const char* launch_norm_forward(const NormForward& args, void* stream);
const char* launch_norm_backward(const NormBackward& args, void* stream);
const char* launch_swiglu_forward(const SwigluForward& args, void* stream);
const char* launch_swiglu_backward(const SwigluBackward& args, void* stream);
const char* launch_rotary(const Rotary& args, void* stream);
const char* launch_cross_entropy(const CrossEntropy& args, void* stream);

// Whether this build holds code the current device can run (its compute
// capability among CMAKE_CUDA_ARCHITECTURES, or a newer one that JIT-compiles
// the PTX of the newest).
bool kernels_run_on_current_device();

// How many blocks launch_norm_backward runs for `rows` rows on the current
// device (a few per multiprocessor): the partial_rows to allocate.
int64_t norm_backward_blocks(int64_t rows);

}  // namespace accel::runtime::cuda_kernels
