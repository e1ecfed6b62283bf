// The trainer's AdamW state over units (see flat_adamw.h).
#include "host/train/flat_adamw.h"

namespace accel::train {

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
  const model::AdamWHyper hyper{lr, o.beta1, o.beta2, o.eps, o.weight_decay};
  for (size_t i = 0; i < units.size() && i < exp_avg_.size(); ++i) {
    if (!exp_avg_[i].defined()) continue;
    model::adamw_step_flat(units[i].flat_params(), units[i].flat_grads(), exp_avg_[i], exp_avg_sq_[i],
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
