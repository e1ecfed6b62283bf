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

at::Tensor LossScaler::unscale(std::vector<at::Tensor>& flat_grads) const {
  if (!active_ || flat_grads.empty()) return {};
  const double inverse = 1.0 / scale_;
  // Every buffer's check stays on the device.
  at::Tensor finite = at::ones({}, flat_grads.front().options().dtype(at::kBool));
  for (at::Tensor& g : flat_grads) {
    g.mul_(inverse);
    finite.logical_and_(g.isfinite().all());
  }
  return finite.logical_not();
}

bool LossScaler::unscale_and_check(std::vector<at::Tensor>& flat_grads) const {
  const at::Tensor found_inf = unscale(flat_grads);
  return found_inf.defined() && found_inf.item<bool>();
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
