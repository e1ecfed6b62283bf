// LR schedules (see lr_schedule.h).
#include "host/train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace accel::train {

double learning_rate_at(const OptimizerOptions& o, int64_t step, int64_t run_steps) {
  const int64_t total_steps = o.decay_steps > 0 ? o.decay_steps : run_steps;
  if (step < o.warmup_steps) {
    return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
  }
  if (o.schedule == LrScheduleKind::constant) return o.lr;
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - o.warmup_steps - 1);
  const double progress =
      std::clamp(static_cast<double>(step - o.warmup_steps) / static_cast<double>(decay_steps), 0.0, 1.0);
  if (o.schedule == LrScheduleKind::linear) return o.min_lr + (o.lr - o.min_lr) * (1.0 - progress);
  return o.min_lr + (o.lr - o.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace accel::train
