// AdamW on flat buffers (see adamw_step.h). The op sequence mirrors
// torch.optim.adamw's single-tensor path so results agree to rounding.
#include "host/model/adamw_step.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>

namespace accel::model {

void adamw_step_flat(at::Tensor& param, const at::Tensor& grad, at::Tensor& exp_avg,
                     at::Tensor& exp_avg_sq, int64_t decay_numel, int64_t step, const AdamWHyper& h,
                     int64_t chunk_numel) {
  at::NoGradGuard no_grad;
  const double bias_correction1 = 1.0 - std::pow(h.beta1, static_cast<double>(step));
  const double bias_correction2 = 1.0 - std::pow(h.beta2, static_cast<double>(step));
  const double step_size = h.lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);
  const int64_t numel = param.numel();
  const int64_t chunk = std::max<int64_t>(1, chunk_numel);
  // Every op is elementwise, so stepping chunk by chunk gives the same bits
  // as one pass over the whole buffer, with one chunk-sized temporary (the
  // denominator) instead of two buffer-sized ones: a unit the size of
  // gpt-small's embedding held 2 x 150 MiB at the step's peak.
  for (int64_t begin = 0; begin < numel; begin += chunk) {
    const int64_t n = std::min(chunk, numel - begin);
    at::Tensor p = param.narrow(0, begin, n);
    const at::Tensor g = grad.narrow(0, begin, n);
    at::Tensor m = exp_avg.narrow(0, begin, n);
    at::Tensor v = exp_avg_sq.narrow(0, begin, n);
    if (h.weight_decay != 0.0 && begin < decay_numel) {
      p.narrow(0, 0, std::min(n, decay_numel - begin)).mul_(1.0 - h.lr * h.weight_decay);
    }
    m.lerp_(g, 1.0 - h.beta1);
    v.mul_(h.beta2).addcmul_(g, g, 1.0 - h.beta2);
    // torch's (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps), in place.
    at::Tensor denom = v.sqrt();
    denom.div_(bias_correction2_sqrt).add_(h.eps);
    p.addcdiv_(m, denom, -step_size);
  }
}

}  // namespace accel::model
