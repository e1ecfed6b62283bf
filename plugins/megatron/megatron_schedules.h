// megatron_schedules.h — Megatron-LM's learning-rate and weight-decay
// schedules (megatron/core/optimizer_param_scheduler.py: get_lr, get_wd), as
// the megatron plugin's optimizer step applies them when the MegatronLMPlugin
// fields ask for them.
//
// Megatron counts its scheduler in samples: iteration k (1-based) of a run
// whose global batch is G uses the values at num = (k - 1) x G (the
// scheduler is stepped after each update, from 0). Iteration-based fields
// are multiplied by G; lr_warmup_fraction is a fraction of the decay
// horizon. Pure functions of plain values: thread-safe.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>

namespace accel::megatron {

struct WeightDecaySchedule {
  std::string style = "constant";  // constant | linear | cosine
  double start = 0.0;
  double end = 0.0;
  int64_t incr_samples = 1;  // train_iters x G
};

// From start to end over incr_samples, linearly or along half a cosine;
// `end` from then on (and always when constant: Megatron asserts start == end).
inline double weight_decay_at(const WeightDecaySchedule& wd, int64_t num) {
  if (num > wd.incr_samples || wd.style == "constant") return wd.end;
  const double ratio = static_cast<double>(num) / static_cast<double>(std::max<int64_t>(1, wd.incr_samples));
  const double coeff = wd.style == "linear" ? ratio : 0.5 * (std::cos(std::numbers::pi * (1.0 - ratio)) + 1.0);
  return wd.start + coeff * (wd.end - wd.start);
}

struct LrSchedule {
  std::string style = "linear";  // constant | linear | cosine | inverse-square-root
  double max_lr = 0.0;
  double min_lr = 0.0;
  double init_lr = 0.0;  // Megatron's lr_warmup_init
  int64_t warmup_samples = 0;
  int64_t decay_samples = 1;
};

// Linear warmup from init_lr to max_lr over warmup_samples; then constant,
// or decay to min_lr at decay_samples (linear, cosine, or max_lr x
// sqrt(warmup / num) floored at min_lr); min_lr after the horizon.
inline double learning_rate_at(const LrSchedule& lr, int64_t num) {
  if (lr.warmup_samples > 0 && num <= lr.warmup_samples) {
    return lr.init_lr +
           (lr.max_lr - lr.init_lr) * static_cast<double>(num) / static_cast<double>(lr.warmup_samples);
  }
  if (lr.style == "constant") return lr.max_lr;
  if (num > lr.decay_samples) return lr.min_lr;
  if (lr.style == "inverse-square-root") {
    const double warmup = static_cast<double>(std::max<int64_t>(lr.warmup_samples, 1));
    return std::max(lr.min_lr, lr.max_lr * std::sqrt(warmup) / std::sqrt(static_cast<double>(std::max<int64_t>(num, 1))));
  }
  const double ratio = static_cast<double>(num - lr.warmup_samples) /
                       static_cast<double>(std::max<int64_t>(1, lr.decay_samples - lr.warmup_samples));
  const double coeff = lr.style == "linear" ? 1.0 - ratio : 0.5 * (std::cos(std::numbers::pi * ratio) + 1.0);
  return lr.min_lr + coeff * (lr.max_lr - lr.min_lr);
}

}  // namespace accel::megatron
