// Which steps the profiler records: torch.profiler.schedule's state machine,
// step for step. Steps are counted from 0 at the first step this run trains
// (as torch counts prof.step() calls). The first `skip_first` steps are
// skipped; then cycles of `wait` idle steps, `warmup` steps traced and
// discarded, and `active` steps recorded, the last of which saves the cycle
// (on_trace_ready); `repeat` cycles (0: forever). Without a schedule every
// step is recorded and the trace is saved at the end of the run.
//
// Invariant: active >= 1, every field >= 0 (the option schema enforces
// it) and wait + warmup + active fits in int64 (cycle_length; the
// constructor refuses a spec whose cycle does not, which once made the cycle
// wrap to 0 and `step % 0` kill the process). Pure value type; no threads.
#pragma once

#include <cstdint>
#include <optional>

namespace accel::profiler {

enum class StepAction { none, warmup, record, record_and_save };

const char* action_name(StepAction action);

struct ScheduleSpec {
  bool enabled = false;  // false: every step is recorded
  int64_t wait = 0;
  int64_t warmup = 0;
  int64_t active = 1;
  int64_t repeat = 0;
  int64_t skip_first = 0;
};

// wait + warmup + active, or nullopt when the sum leaves int64.
std::optional<int64_t> cycle_length(const ScheduleSpec& spec);

class Schedule {
 public:
  // Throws std::invalid_argument when the cycle does not fit (cycle_length).
  explicit Schedule(const ScheduleSpec& spec);

  // What step `step` (0-based, this run's) does.
  StepAction action(int64_t step) const;
  // Whether the host must capture events during step `step` (warmup too:
  // torch traces warmup steps and throws their events away).
  bool captures(int64_t step) const { return action(step) != StepAction::none; }
  bool records(int64_t step) const {
    const StepAction a = action(step);
    return a == StepAction::record || a == StepAction::record_and_save;
  }
  // The 0-based cycle step `step` belongs to (meaningful for recorded steps).
  int64_t cycle(int64_t step) const;
  const ScheduleSpec& spec() const { return spec_; }
  // "wait=1 warmup=1 active=2 repeat=2 skip_first=1" or "every step".
  const char* describe(char* buffer, int size) const;

 private:
  ScheduleSpec spec_;
  int64_t cycle_length_ = 1;  // wait + warmup + active, checked
};

}  // namespace accel::profiler
