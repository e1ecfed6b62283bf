// Dynamic loss scaling (see loss_scaler.h).
#include "host/train/loss_scaler.h"

#include <algorithm>

namespace accel::train {

LossScaler::LossScaler(const GradScalerOptions& options, bool active)
    : options_(options),
      active_(active && options.enabled),
      scale_(options.init_scale),
      hysteresis_left_(options.hysteresis) {}

void LossScaler::restore(double scale, int64_t growth_tracker) {
  scale_ = scale;
  growth_tracker_ = growth_tracker;
  hysteresis_left_ = options_.hysteresis;
}

bool LossScaler::unscale_and_check(std::vector<at::Tensor>& flat_grads) const {
  if (!active_) return false;
  bool found_inf = false;
  const double inverse = 1.0 / scale_;
  for (at::Tensor& g : flat_grads) {
    g.mul_(inverse);
    if (!found_inf && !g.isfinite().all().item<bool>()) found_inf = true;
  }
  return found_inf;
}

void LossScaler::update(bool found_inf) {
  if (!active_) return;
  if (found_inf) {
    if (hysteresis_left_ > 1) {
      --hysteresis_left_;  // skipped, the scale kept (DeepSpeed's hysteresis)
    } else {
      scale_ = std::max(scale_ * options_.backoff_factor, options_.min_scale);
    }
    growth_tracker_ = 0;
    return;
  }
  if (++growth_tracker_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
    hysteresis_left_ = options_.hysteresis;
  }
}

}  // namespace accel::train
