// Learning rate per optimizer step: linear warmup, then constant, linear or
// cosine decay to min_lr at the run's last step. Pure function of the step,
// so a resumed run continues the same curve.
#pragma once

#include <cstdint>

#include "host/cli/run_config.h"

namespace accel::train {

// step is 0-based: the lr used by the (step+1)-th optimizer step.
//  warmup:  lr * (step + 1) / warmup_steps           for step < warmup_steps
//  then p = (step - warmup) / max(1, total - warmup - 1), clamped to [0, 1]:
//  linear:  min_lr + (lr - min_lr) * (1 - p)
//  cosine:  min_lr + (lr - min_lr) * (1 + cos(pi p)) / 2
// total_steps is options.decay_steps when set, else the run's --steps.
double learning_rate_at(const OptimizerOptions& options, int64_t step, int64_t run_steps);

}  // namespace accel::train
