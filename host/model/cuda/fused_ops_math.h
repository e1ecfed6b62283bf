// fused_ops_math.h — the per-element arithmetic of the model's fused
// kernels (fused_ops.cu), shared with their CPU references
// (host/model/fused_ops_reference.cpp), which the CPU tests pin against
// ATen's unfused composition (tests/model/fused_ops_test.cpp). All of it in
// fp32, whatever the tensors store. No CUDA or LibTorch types.
#pragma once

#include <cmath>

#include "host/model/cuda/host_device.h"

namespace accel::runtime::cuda_math {

ACCEL_HOST_DEVICE inline float exp_of(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  return std::exp(x);
#endif
}

ACCEL_HOST_DEVICE inline float log_of(float x) {
#if defined(__CUDA_ARCH__)
  return logf(x);
#else
  return std::log(x);
#endif
}

ACCEL_HOST_DEVICE inline float rsqrt_of(float x) {
#if defined(__CUDA_ARCH__)
  return rsqrtf(x);
#else
  return 1.0f / std::sqrt(x);
#endif
}

// ---- LayerNorm / RMSNorm over the last dimension -------------------------
// A row's statistics: `mean` (0 for RMSNorm, which does not centre) and
// rstd = 1 / sqrt(mean((v - mean)^2) + eps). RMSNorm is transformers'
// LlamaRMSNorm on an fp32 row: v * rsqrt(mean(v^2) + eps), then the weight.

ACCEL_HOST_DEVICE inline float norm_rstd(float centred_square_sum, int64_t cols, float eps) {
  return rsqrt_of(centred_square_sum / static_cast<float>(cols) + eps);
}

// n = (v - mean) * rstd; y = w * n (+ b).
ACCEL_HOST_DEVICE inline float normalized(float v, float mean, float rstd) { return (v - mean) * rstd; }

// d loss / d v for one element of the row, from g = dy * w, this element's
// n, and the row's means of g (used only when centred) and of g * n:
// rstd * (g - mean(g) - n * mean(g n)); RMSNorm drops the mean(g) term.
ACCEL_HOST_DEVICE inline float norm_input_grad(float g, float n, float rstd, float mean_g, float mean_gn,
                                               bool centred) {
  return rstd * (g - (centred ? mean_g : 0.0f) - n * mean_gn);
}

// ---- SwiGLU: y = silu(gate) * up -------------------------------------------

ACCEL_HOST_DEVICE inline float sigmoid_of(float x) { return 1.0f / (1.0f + exp_of(-x)); }

ACCEL_HOST_DEVICE inline float swiglu(float gate, float up) { return gate * sigmoid_of(gate) * up; }

// d/d gate and d/d up of dy * silu(gate) * up.
struct SwigluGrads {
  float gate;
  float up;
};

ACCEL_HOST_DEVICE inline SwigluGrads swiglu_grads(float dy, float gate, float up) {
  const float s = sigmoid_of(gate);
  const float silu = gate * s;
  return {dy * up * s * (1.0f + gate * (1.0f - s)), dy * silu};
}

// ---- Rotary embeddings, the rotate_half form --------------------------------
// For a head vector x of D elements and half = D / 2, with c, s the cosines
// and sines of its position's angles ([D], as transformers lays them out):
//   y[i]        = x[i] c[i] - x[i + half] s[i]                 (i < half)
//   y[i + half] = x[i + half] c[i + half] + x[i] s[i + half]
// `partner` is x[i + half] for a first-half i and x[i - half] otherwise.

ACCEL_HOST_DEVICE inline float rotary(float x, float partner, float c, float s, bool first_half) {
  return x * c + (first_half ? -partner : partner) * s;
}

// The gradient of that map at x[i], from dy[i] and its partner dy[j]
// (j = i +- half), with c[i] and s[j]: each y[j] takes x[i] with weight
// -s[j] (j in the first half) or +s[j].
ACCEL_HOST_DEVICE inline float rotary_grad(float dy, float partner_dy, float c, float partner_s, bool first_half) {
  return dy * c + (first_half ? partner_dy : -partner_dy) * partner_s;
}

// ---- Cross-entropy over a row of logits ---------------------------------------
// A running (max, sum of exp(x - max)) that merges in any order: the
// one-pass softmax normaliser.
struct SoftmaxRunning {
  float max;
  float sum;
};

// a * b rounded on its own: never fused into a neighbouring add, so that
// softmax_merge(a, b) and softmax_merge(b, a) agree to the bit.
ACCEL_HOST_DEVICE inline float product(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// A running max of -inf (only -inf logits so far) is its own case: the
// rescale exp(max - m) would be exp(-inf - -inf) = exp(NaN) when the other
// side is -inf too. Such a sum counts -inf logits as exp(0) each, which the
// first finite logit multiplies by exp(-inf - x) = 0, as ATen's
// log_softmax leaves them out; a row of -inf only stays NaN, as ATen's.
ACCEL_HOST_DEVICE inline SoftmaxRunning softmax_merge(SoftmaxRunning a, SoftmaxRunning b) {
  if (a.sum == 0.0f) return b;
  if (b.sum == 0.0f) return a;
  const float m = a.max > b.max ? a.max : b.max;
  if (m == -INFINITY) return {m, a.sum + b.sum};
  return {m, product(a.sum, exp_of(a.max - m)) + product(b.sum, exp_of(b.max - m))};
}

// One more logit, with one exp.
ACCEL_HOST_DEVICE inline SoftmaxRunning softmax_add(SoftmaxRunning a, float x) {
  if (a.sum == 0.0f) return {x, 1.0f};
  if (x > a.max) return {x, a.sum * exp_of(a.max - x) + 1.0f};
  if (a.max == -INFINITY) return {a.max, a.sum + 1.0f};  // x is -inf too
  return {a.max, a.sum + exp_of(x - a.max)};
}

// -log softmax(row)[label] = log(sum) + max - x[label].
ACCEL_HOST_DEVICE inline float cross_entropy_loss(SoftmaxRunning r, float label_logit) {
  return log_of(r.sum) + r.max - label_logit;
}

// The gradient at one logit: (softmax - onehot) * factor, where factor is
// the loss's multiplier over the row count (autograd's nll_loss factor).
ACCEL_HOST_DEVICE inline float cross_entropy_grad(float x, SoftmaxRunning r, bool is_label, float factor) {
  const float p = exp_of(x - r.max) / r.sum;
  return (is_label ? p - 1.0f : p) * factor;
}

}  // namespace accel::runtime::cuda_math
