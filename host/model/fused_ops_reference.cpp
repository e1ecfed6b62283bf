// fused_ops_reference.cpp — see fused_ops_reference.h.
#include "host/model/fused_ops_reference.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "host/model/cuda/fused_ops_math.h"

namespace accel::model::fused_reference {
namespace {

namespace math = runtime::cuda_math;
using runtime::cuda_kernels::Storage;

// Element i of a buffer in `type`, as fp32 (exact for all three).
float load(const void* p, Storage type, int64_t i) {
  switch (type) {
    case Storage::f32: return static_cast<const float*>(p)[i];
    case Storage::bf16: return static_cast<float>(static_cast<const c10::BFloat16*>(p)[i]);
    case Storage::f16: return static_cast<float>(static_cast<const c10::Half*>(p)[i]);
  }
  return 0.0f;
}

// Rounded to nearest even, as the kernels' __float2bfloat16_rn and __float2half_rn.
void store(void* p, Storage type, int64_t i, float v) {
  switch (type) {
    case Storage::f32: static_cast<float*>(p)[i] = v; return;
    case Storage::bf16: static_cast<c10::BFloat16*>(p)[i] = c10::BFloat16(v); return;
    case Storage::f16: static_cast<c10::Half*>(p)[i] = c10::Half(v); return;
  }
}

// v as `type` holds it.
float rounded(Storage type, float v) {
  switch (type) {
    case Storage::bf16: return static_cast<float>(c10::BFloat16(v));
    case Storage::f16: return static_cast<float>(c10::Half(v));
    case Storage::f32: break;
  }
  return v;
}

}  // namespace

void norm_forward(const runtime::cuda_kernels::NormForward& a) {
  std::vector<float> v(static_cast<size_t>(a.cols));
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t base = r * a.cols;
    float sum = 0.0f;
    for (int64_t j = 0; j < a.cols; ++j) {
      v[j] = load(a.input, a.input_type, base + j);
      if (a.delta != nullptr) {
        v[j] = rounded(a.input_type, v[j] + load(a.delta, a.delta_type, base + j));
        store(a.sum, a.input_type, base + j, v[j]);
      }
      sum += v[j];
    }
    const float mean = a.centred ? sum / static_cast<float>(a.cols) : 0.0f;
    float squares = 0.0f;
    for (int64_t j = 0; j < a.cols; ++j) squares += (v[j] - mean) * (v[j] - mean);
    const float rstd = math::norm_rstd(squares, a.cols, a.eps);
    for (int64_t j = 0; j < a.cols; ++j) {
      const float b = a.bias != nullptr ? load(a.bias, a.weight_type, j) : 0.0f;
      store(a.output, a.output_type, base + j, load(a.weight, a.weight_type, j) * math::normalized(v[j], mean, rstd) + b);
    }
    a.stats[2 * r] = mean;
    a.stats[2 * r + 1] = rstd;
  }
}

void norm_backward(const runtime::cuda_kernels::NormBackward& a) {
  // One "block": the partials' first row holds every row's sums, the rest zeros.
  for (int64_t i = 0; i < a.partial_rows * a.cols; ++i) {
    a.weight_partials[i] = 0.0f;
    if (a.bias_partials != nullptr) a.bias_partials[i] = 0.0f;
  }
  std::vector<float> g(static_cast<size_t>(a.cols)), n(static_cast<size_t>(a.cols));
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t base = r * a.cols;
    const float mean = a.stats[2 * r], rstd = a.stats[2 * r + 1];
    float sum_g = 0.0f, sum_gn = 0.0f;
    for (int64_t j = 0; j < a.cols; ++j) {
      const float dy = a.grad_output != nullptr ? load(a.grad_output, a.grad_type, base + j) : 0.0f;
      n[j] = math::normalized(load(a.normed_input, a.input_type, base + j), mean, rstd);
      g[j] = dy * load(a.weight, a.weight_type, j);
      sum_g += g[j];
      sum_gn += g[j] * n[j];
      a.weight_partials[j] += dy * n[j];
      if (a.bias_partials != nullptr) a.bias_partials[j] += dy;
    }
    const float mean_g = sum_g / static_cast<float>(a.cols), mean_gn = sum_gn / static_cast<float>(a.cols);
    for (int64_t j = 0; j < a.cols; ++j) {
      const float other = a.grad_sum != nullptr ? load(a.grad_sum, a.input_type, base + j) : 0.0f;
      store(a.grad_input, a.input_type, base + j,
            math::norm_input_grad(g[j], n[j], rstd, mean_g, mean_gn, a.centred) + other);
    }
  }
}

void swiglu_forward(const runtime::cuda_kernels::SwigluForward& a) {
  for (int64_t i = 0; i < a.count; ++i) {
    store(a.output, a.type, i, math::swiglu(load(a.gate, a.type, i), load(a.up, a.type, i)));
  }
}

void swiglu_backward(const runtime::cuda_kernels::SwigluBackward& a) {
  for (int64_t i = 0; i < a.count; ++i) {
    const math::SwigluGrads grads =
        math::swiglu_grads(load(a.grad_output, a.type, i), load(a.gate, a.type, i), load(a.up, a.type, i));
    store(a.grad_gate, a.type, i, grads.gate);
    store(a.grad_up, a.type, i, grads.up);
  }
}

void rotary(const runtime::cuda_kernels::Rotary& a) {
  const int64_t D = a.head_dim, half = D / 2;
  for (int64_t t = 0; t < a.positions; ++t) {
    const float* c = a.cos + t * D;
    const float* s = a.sin + t * D;
    for (int64_t v = 0; v < a.vectors; ++v) {
      const int64_t base = (t * a.vectors + v) * D;
      for (int64_t i = 0; i < D; ++i) {
        const bool first = i < half;
        const int64_t partner = first ? i + half : i - half;
        const float x = load(a.input, a.type, base + i), px = load(a.input, a.type, base + partner);
        const float y = a.backward ? math::rotary_grad(x, px, c[i], s[partner], first)
                                   : math::rotary(x, px, c[i], s[i], first);
        store(a.output, a.type, base + i, y);
      }
    }
  }
}

void cross_entropy(const runtime::cuda_kernels::CrossEntropy& a) {
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t in = r * a.row_stride, out = r * a.cols;
    math::SoftmaxRunning running{0.0f, 0.0f};
    for (int64_t j = 0; j < a.cols; ++j) running = math::softmax_add(running, load(a.logits, a.type, in + j));
    const int64_t label = a.labels[r];
    const bool known = label >= 0 && label < a.cols;  // else NaN, never a read out of the row
    a.row_losses[r] = known ? math::cross_entropy_loss(running, load(a.logits, a.type, in + label)) : NAN;
    for (int64_t j = 0; j < a.cols; ++j) {
      store(a.grad, a.type, out + j,
            math::cross_entropy_grad(load(a.logits, a.type, in + j), running, j == label, a.factor));
    }
  }
}

}  // namespace accel::model::fused_reference
