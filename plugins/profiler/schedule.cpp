// torch.profiler.schedule, transcribed (see schedule.h):
//
//   if step < skip_first: NONE
//   step -= skip_first; num_steps = wait + warmup + active
//   if repeat > 0 and step / num_steps >= repeat: NONE
//   mod = step % num_steps
//   mod < wait: NONE; mod < wait + warmup: WARMUP;
//   else RECORD, or RECORD_AND_SAVE on the cycle's last step.
#include "schedule.h"

#include <accel/sdk/checked_math.hpp>

#include <cstdio>
#include <stdexcept>

namespace accel::profiler {

std::optional<int64_t> cycle_length(const ScheduleSpec& spec) {
  const std::optional<int64_t> idle = sdk::checked_add(spec.wait, spec.warmup);
  return idle ? sdk::checked_add(*idle, spec.active) : std::nullopt;
}

Schedule::Schedule(const ScheduleSpec& spec) : spec_(spec) {
  if (!spec.enabled) return;
  const std::optional<int64_t> length = cycle_length(spec);
  if (!length || *length < 1) {
    throw std::invalid_argument("the profiler schedule's cycle (wait + warmup + active) is not a positive 64-bit "
                                "step count");
  }
  cycle_length_ = *length;
}

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
  const int64_t num_steps = cycle_length_;
  if (spec_.repeat > 0 && step / num_steps >= spec_.repeat) return StepAction::none;
  const int64_t mod = step % num_steps;
  if (mod < spec_.wait) return StepAction::none;
  if (mod < spec_.wait + spec_.warmup) return StepAction::warmup;
  return mod < num_steps - 1 ? StepAction::record : StepAction::record_and_save;
}

int64_t Schedule::cycle(int64_t step) const {
  if (!spec_.enabled || step < spec_.skip_first) return 0;
  return (step - spec_.skip_first) / cycle_length_;
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
