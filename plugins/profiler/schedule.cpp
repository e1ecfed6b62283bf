// torch.profiler.schedule, transcribed (see schedule.h):
//
//   if step < skip_first: NONE
//   step -= skip_first; num_steps = wait + warmup + active
//   if repeat > 0 and step / num_steps >= repeat: NONE
//   mod = step % num_steps
//   mod < wait: NONE; mod < wait + warmup: WARMUP;
//   else RECORD, or RECORD_AND_SAVE on the cycle's last step.
#include "schedule.h"

#include <cstdio>

namespace accel::profiler {

const char* action_name(StepAction action) {
  switch (action) {
    case StepAction::none: return "none";
    case StepAction::warmup: return "warmup";
    case StepAction::record: return "record";
    case StepAction::record_and_save: return "record_and_save";
  }
  return "none";
}

StepAction Schedule::action(int64_t step) const {
  if (!spec_.enabled) return StepAction::record;
  if (step < spec_.skip_first) return StepAction::none;
  step -= spec_.skip_first;
  const int64_t num_steps = spec_.wait + spec_.warmup + spec_.active;
  if (spec_.repeat > 0 && step / num_steps >= spec_.repeat) return StepAction::none;
  const int64_t mod = step % num_steps;
  if (mod < spec_.wait) return StepAction::none;
  if (mod < spec_.wait + spec_.warmup) return StepAction::warmup;
  return mod < num_steps - 1 ? StepAction::record : StepAction::record_and_save;
}

int64_t Schedule::cycle(int64_t step) const {
  if (!spec_.enabled || step < spec_.skip_first) return 0;
  return (step - spec_.skip_first) / (spec_.wait + spec_.warmup + spec_.active);
}

const char* Schedule::describe(char* buffer, int size) const {
  if (!spec_.enabled) {
    std::snprintf(buffer, static_cast<size_t>(size), "every step");
  } else {
    std::snprintf(buffer, static_cast<size_t>(size), "wait=%lld warmup=%lld active=%lld repeat=%lld skip_first=%lld",
                  static_cast<long long>(spec_.wait), static_cast<long long>(spec_.warmup),
                  static_cast<long long>(spec_.active), static_cast<long long>(spec_.repeat),
                  static_cast<long long>(spec_.skip_first));
  }
  return buffer;
}

}  // namespace accel::profiler
