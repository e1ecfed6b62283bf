// zero_schedule.cpp — DeepSpeed's learning-rate schedules (WarmupLR,
// WarmupDecayLR, WarmupCosineLR of deepspeed/runtime/lr_schedules.py), the
// schedules a DeepSpeed config's "scheduler" names in place of accel-host's
// own (see zero_config.h). Pure functions: thread-safe.
#include <algorithm>
#include <cmath>

#include "zero_config.h"

namespace accel::zero {

double schedule_lr(const Schedule& s, int64_t step, double base_lr) {
  const auto warmup_gamma = [&](int64_t t) {
    const double n = static_cast<double>(std::max<int64_t>(2, s.warmup_num_steps));
    return s.warmup_type == WarmupType::log ? std::log(static_cast<double>(t + 1)) / std::log(n)
                                            : static_cast<double>(t) / n;
  };
  const double delta = s.warmup_max_lr - s.warmup_min_lr;
  switch (s.kind) {
    case ScheduleKind::warmup_lr:
      return s.warmup_min_lr + delta * (step < s.warmup_num_steps ? warmup_gamma(step) : 1.0);
    case ScheduleKind::warmup_decay_lr: {
      if (step < s.warmup_num_steps) return s.warmup_min_lr + delta * warmup_gamma(step);
      const double span = static_cast<double>(std::max<int64_t>(1, s.total_num_steps - s.warmup_num_steps));
      return s.warmup_min_lr + delta * std::max(0.0, static_cast<double>(s.total_num_steps - step) / span);
    }
    case ScheduleKind::warmup_cosine_lr: {
      if (step < s.warmup_num_steps) {
        return base_lr * (s.warmup_min_ratio + warmup_gamma(step) * (1.0 - s.warmup_min_ratio));
      }
      const double done = static_cast<double>(step - s.warmup_num_steps + 1);
      const double total = static_cast<double>(s.total_num_steps - s.warmup_num_steps);
      const double ratio = (1.0 + std::cos(M_PI * done / total)) / 2.0;
      return base_lr * std::max(0.0, s.cos_min_ratio + (1.0 - s.cos_min_ratio) * ratio);
    }
    default:
      return base_lr;
  }
}

}  // namespace accel::zero
