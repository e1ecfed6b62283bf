// The dynamic loss scaler for fp16 (GradScalerKwargs): multiply the loss by
// `scale` before backward, divide the gradients after; a step whose
// gradients hold inf/nan is skipped and the scale backs off; after
// growth_interval finite steps in a row it grows. torch.amp.GradScaler's rules,
// with DeepSpeed's two additions: hysteresis (only the Nth overflow since the
// last growth backs off; the others just skip) and a floor (min_scale). A
// resume restores the scale and the growth tracker and refills the hysteresis.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "host/cli/run_config.h"

namespace accel::train {

class LossScaler {
 public:
  LossScaler(const GradScalerOptions& options, bool active);

  bool active() const { return active_; }
  double scale() const { return active_ ? scale_ : 1.0; }
  int64_t growth_tracker() const { return growth_tracker_; }
  void restore(double scale, int64_t growth_tracker);

  // Divides gradients by the scale; returns whether any is inf or nan as a
  // 0-dim bool on their device, read by no one here (undefined when the
  // scaler is inactive or there are no gradients).
  at::Tensor unscale(std::vector<at::Tensor>& flat_grads) const;
  // unscale() with its verdict read on the host (a synchronisation).
  bool unscale_and_check(std::vector<at::Tensor>& flat_grads) const;
  // Adjusts the scale after a step; found_inf means the step was skipped.
  void update(bool found_inf);

 private:
  GradScalerOptions options_;
  bool active_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t hysteresis_left_;  // overflows still absorbed before the next back-off
};

}  // namespace accel::train
