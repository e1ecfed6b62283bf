// fused_ops.h — the model's fused operations: the residual add with
// LayerNorm or RMSNorm, SwiGLU, rotary embeddings and the vocabulary
// cross-entropy, each one kernel forward and one backward on a CUDA device
// (host/model/cuda/fused_ops_kernel.h) where ATen's composition launches
// several, each a pass over memory.
//
// The same functions run on the CPU through the kernels' references
// (fused_ops_reference.h): everything but the kernels' inner loops (the
// arguments, the autograd wiring, the partial sums) is what a CPU test
// exercises. The model uses them only where `fused_kernels_serve` says so
// (a CUDA device, with the kernels built, unless --fused-kernels off); the
// CPU keeps ATen's composition, whose bits the parity tests pin.
//
// Each function takes what `*_supported` accepts and throws
// std::invalid_argument otherwise. Thread-safety: any thread; the work is
// queued on the tensors' device's current stream.
#pragma once

#include <ATen/ATen.h>

#include "host/model/cross_entropy.h"

namespace accel::model::fused {

// Whether this build has the CUDA kernels (CMake found nvcc).
bool kernels_built();

// Whether the model should take the fused path for tensors on `device`:
// a CUDA device in a build with the kernels, and `enabled`.
bool fused_kernels_serve(const at::Device& device, bool enabled);

struct AddNorm {
  at::Tensor sum;     // residual + delta (undefined when no delta was given)
  at::Tensor normed;  // w * n (+ b), in the output type asked for
};

// Whether add_norm takes these: a residual [..., C] with C <= 8,192 in
// fp32, bf16 or fp16; weight (and bias) [C] in fp32 or the residual's type;
// delta (if defined) of the residual's shape in a float type whose sum with
// the residual keeps the residual's type (as ATen's add would); one device.
bool add_norm_supported(const at::Tensor& residual, const at::Tensor& delta, const at::Tensor& weight,
                        const at::Tensor& bias);

// sum = residual + delta (delta undefined: the residual alone; rounded to
// the residual's type), then LayerNorm (`centred`, with bias) or RMSNorm
// (transformers' LlamaRMSNorm, statistics in fp32; bias undefined) of each
// row of the sum, computed in fp32 and rounded once to `output_type` (fp32,
// bf16 or fp16). Differentiable in residual, delta, weight and bias.
AddNorm add_norm(const at::Tensor& residual, const at::Tensor& delta, const at::Tensor& weight,
                 const at::Tensor& bias, double eps, bool centred, at::ScalarType output_type);

// Whether swiglu takes these: one shape, one float dtype, contiguous.
bool swiglu_supported(const at::Tensor& gate, const at::Tensor& up);

// silu(gate) * up, rounded once. Differentiable in both.
at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up);

// Whether rotary takes these: x [T, ..., D] contiguous with D even, cos and
// sin fp32 [T, D] on x's device.
bool rotary_supported(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// x * cos + rotate_half(x) * sin at each position t (x's first dimension),
// rounded once to x's dtype. Differentiable in x.
at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// Whether cross_entropy_with_grad takes these: float logits [..., V] whose
// rows are views with unit stride, labels of their row count.
bool cross_entropy_supported(const at::Tensor& logits, const at::Tensor& labels);

// model::cross_entropy_with_grad's contract (cross_entropy.h) in one pass
// per row and no float copy of the logits: the gradient is written in the
// logits' dtype, the loss summed from each row's in fp32.
LossAndGrad cross_entropy_with_grad(const at::Tensor& logits, const at::Tensor& labels, double multiplier);

}  // namespace accel::model::fused
