// AdamW on flat buffers (see adamw_step.h). The op sequence mirrors
// torch.optim.adamw's single-tensor path so results agree to rounding.
#include "host/model/adamw_step.h"

#include <ATen/core/grad_mode.h>

#include <cmath>

namespace accel::model {

void adamw_step_flat(at::Tensor& param, const at::Tensor& grad, at::Tensor& exp_avg,
                     at::Tensor& exp_avg_sq, int64_t decay_numel, int64_t step, const AdamWHyper& h) {
  at::NoGradGuard no_grad;
  if (h.weight_decay != 0.0 && decay_numel > 0) {
    param.narrow(0, 0, decay_numel).mul_(1.0 - h.lr * h.weight_decay);
  }
  exp_avg.lerp_(grad, 1.0 - h.beta1);
  exp_avg_sq.mul_(h.beta2).addcmul_(grad, grad, 1.0 - h.beta2);
  const double bias_correction1 = 1.0 - std::pow(h.beta1, static_cast<double>(step));
  const double bias_correction2 = 1.0 - std::pow(h.beta2, static_cast<double>(step));
  const double step_size = h.lr / bias_correction1;
  const at::Tensor denom = (exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(h.eps);
  param.addcdiv_(exp_avg, denom, -step_size);
}

}  // namespace accel::model
