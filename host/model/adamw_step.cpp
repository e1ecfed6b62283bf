// AdamW on flat buffers (see adamw_step.h). The op sequence mirrors
// torch.optim.adamw's single-tensor path so results agree to rounding.
#include "host/model/adamw_step.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <tuple>

namespace accel::model {

void adamw_moments_flat(const at::Tensor& grad, at::Tensor& exp_avg, at::Tensor& exp_avg_sq, const AdamWHyper& h) {
  at::NoGradGuard no_grad;
  exp_avg.lerp_(grad, 1.0 - h.beta1);
  exp_avg_sq.mul_(h.beta2).addcmul_(grad, grad, 1.0 - h.beta2);
}

void adamw_param_flat(at::Tensor& param, const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq,
                      int64_t decay_numel, int64_t step, const AdamWHyper& h) {
  at::NoGradGuard no_grad;
  if (h.weight_decay != 0.0 && decay_numel > 0) {
    param.narrow(0, 0, std::min(decay_numel, param.numel())).mul_(1.0 - h.lr * h.weight_decay);
  }
  const double bias_correction1 = 1.0 - std::pow(h.beta1, static_cast<double>(step));
  const double bias_correction2 = 1.0 - std::pow(h.beta2, static_cast<double>(step));
  const double step_size = h.lr / bias_correction1;
  // torch's (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps), with one
  // temporary instead of two (the same ops, so the same bits).
  at::Tensor denom = exp_avg_sq.sqrt();
  denom.div_(std::sqrt(bias_correction2)).add_(h.eps);
  param.addcdiv_(exp_avg, denom, -step_size);
}

void adamw_step_flat(at::Tensor& param, const at::Tensor& grad, at::Tensor& exp_avg,
                     at::Tensor& exp_avg_sq, int64_t decay_numel, int64_t step, const AdamWHyper& h,
                     int64_t chunk_numel) {
  if (param.is_cuda()) {
    adamw_step_fused_flat(param, grad, exp_avg, exp_avg_sq, decay_numel, step, h);
    return;
  }
  const int64_t numel = param.numel();
  const int64_t chunk = std::max<int64_t>(1, chunk_numel);
  // Every op is elementwise, so stepping chunk by chunk gives the same bits
  // as one pass over the whole buffer, with one chunk-sized temporary (the
  // denominator) instead of two buffer-sized ones: a unit the size of
  // gpt-small's embedding held 2 x 150 MiB at the step's peak. The weight
  // decay touches only the parameter: applying it after the moments'
  // update changes no bit of torch.optim.AdamW's order.
  for (int64_t begin = 0; begin < numel; begin += chunk) {
    const int64_t n = std::min(chunk, numel - begin);
    at::Tensor p = param.narrow(0, begin, n);
    at::Tensor m = exp_avg.narrow(0, begin, n);
    at::Tensor v = exp_avg_sq.narrow(0, begin, n);
    adamw_moments_flat(grad.narrow(0, begin, n), m, v, h);
    adamw_param_flat(p, m, v, std::max<int64_t>(0, decay_numel - begin), step, h);
  }
}

void adamw_step_fused_flat(at::Tensor& param, const at::Tensor& grad, at::Tensor& exp_avg, at::Tensor& exp_avg_sq,
                           int64_t decay_numel, int64_t step, const AdamWHyper& h, const at::Tensor& found_inf) {
  at::NoGradGuard no_grad;
  const int64_t numel = param.numel();
  const int64_t decayed = std::clamp<int64_t>(decay_numel, 0, numel);
  // The step count as the fused kernel reads it: an fp32 scalar on the
  // buffers' device (a fill, no copy from the host).
  const at::Tensor steps = at::full({}, static_cast<double>(step), param.options().dtype(at::kFloat));
  const at::Tensor g = grad.scalar_type() == param.scalar_type() ? grad : grad.to(param.scalar_type());
  // The kernel skips on exactly 1.0; the ABI's rule is any non-zero value.
  const std::optional<at::Tensor> skip =
      found_inf.defined() ? std::optional<at::Tensor>(found_inf.to(param.device()).ne(0).to(at::kFloat))
                          : std::nullopt;
  for (const auto& [begin, n, decay] : {std::tuple{int64_t{0}, decayed, h.weight_decay},
                                        std::tuple{decayed, numel - decayed, 0.0}}) {
    if (n == 0) continue;
    at::_fused_adamw_({param.narrow(0, begin, n)}, {g.narrow(0, begin, n)}, {exp_avg.narrow(0, begin, n)},
                      {exp_avg_sq.narrow(0, begin, n)}, {}, {steps}, h.lr, h.beta1, h.beta2, decay, h.eps,
                      /*amsgrad=*/false, /*maximize=*/false, /*grad_scale=*/std::nullopt, skip);
  }
}

// ---------------------------------------------------------------------------
// Scaled moments

double moment_format_max(at::ScalarType format) {
  if (format == at::ScalarType::Float8_e4m3fn) return 448.0;
  if (format == at::kHalf) return 65504.0;
  return 3.4028234663852886e38;
}

float moment_scale(float amax, at::ScalarType format) {
  if (!(amax > 0.0f) || !std::isfinite(amax)) return 1.0f;
  return static_cast<float>(std::ldexp(1.0, static_cast<int>(std::floor(std::log2(moment_format_max(format) / amax)))));
}

at::Tensor dequantize_moment(const at::Tensor& stored, float scale) {
  at::Tensor values = stored.to(at::kFloat);
  return scale == 1.0f ? values.clone() : values.div_(scale);
}

void quantize_moment(const at::Tensor& values, float scale, at::Tensor& stored) {
  at::NoGradGuard no_grad;
  const double limit = moment_format_max(stored.scalar_type());
  stored.copy_((values * scale).clamp_(-limit, limit));
}

namespace {
float abs_max(const at::Tensor& t) { return t.numel() == 0 ? 0.0f : t.abs().max().item<float>(); }
}  // namespace

void adamw_step_scaled_flat(at::Tensor& param, const at::Tensor& grad, at::Tensor& exp_avg, float& exp_avg_scale,
                            at::Tensor& exp_avg_sq, float& exp_avg_sq_scale, int64_t decay_numel, int64_t step,
                            const AdamWHyper& h) {
  at::Tensor m = dequantize_moment(exp_avg, exp_avg_scale);
  at::Tensor v = dequantize_moment(exp_avg_sq, exp_avg_sq_scale);
  adamw_moments_flat(grad, m, v, h);
  adamw_param_flat(param, m, v, decay_numel, step, h);
  exp_avg_scale = moment_scale(abs_max(m), exp_avg.scalar_type());
  exp_avg_sq_scale = moment_scale(abs_max(v), exp_avg_sq.scalar_type());
  quantize_moment(m, exp_avg_scale, exp_avg);
  quantize_moment(v, exp_avg_sq_scale, exp_avg_sq);
}

}  // namespace accel::model
