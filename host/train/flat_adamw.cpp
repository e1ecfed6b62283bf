// AdamW on flat buffers (see flat_adamw.h). The op sequence mirrors
// torch.optim.adamw's single-tensor path so results agree to rounding.
#include "host/train/flat_adamw.h"

#include <cmath>

namespace accel::train {

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

void FlatAdamW::allocate_state(const std::vector<model::Unit>& units) {
  exp_avg_.clear();
  exp_avg_sq_.clear();
  for (const model::Unit& unit : units) {
    exp_avg_.push_back(unit.has_params() ? at::zeros_like(unit.flat_params()) : at::Tensor());
    exp_avg_sq_.push_back(unit.has_params() ? at::zeros_like(unit.flat_params()) : at::Tensor());
  }
}

void FlatAdamW::step(std::vector<model::Unit>& units, const OptimizerOptions& o, double lr) {
  ++step_count_;
  const AdamWHyper hyper{lr, o.beta1, o.beta2, o.eps, o.weight_decay};
  for (size_t i = 0; i < units.size() && i < exp_avg_.size(); ++i) {
    if (!exp_avg_[i].defined()) continue;
    adamw_step_flat(units[i].flat_params(), units[i].flat_grads(), exp_avg_[i], exp_avg_sq_[i],
                    units[i].decay_numel(), step_count_, hyper);
  }
}

size_t FlatAdamW::state_bytes() const {
  size_t bytes = 0;
  for (const at::Tensor& t : exp_avg_) bytes += t.defined() ? t.nbytes() : 0;
  for (const at::Tensor& t : exp_avg_sq_) bytes += t.defined() ? t.nbytes() : 0;
  return bytes;
}

}  // namespace accel::train
