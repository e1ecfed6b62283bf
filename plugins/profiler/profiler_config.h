// The profiler's settings: every ProfileKwargs field as a plugin option
// (plugins/profiler/README.md maps them one by one), read and checked once in
// create. A value the option schema cannot check (an unknown activity, an
// output directory that cannot be written) is refused with
// ACCEL_ERROR_INVALID_ARGUMENT and one line naming the option: the host
// reports it as a usage error (exit 2).
//
// Pure value type after construction; no threads.
#pragma once

#include <accel/sdk/sdk.hpp>

#include <cstdint>
#include <string>

#include "schedule.h"

namespace accel::profiler {

struct ProfilerConfig {
  bool cpu = true;    // activities: LibTorch's CPU operators
  bool cuda = true;   // activities: device ranges (events timed on streams)
  ScheduleSpec schedule;
  bool record_shapes = false;
  bool profile_memory = false;
  bool with_stack = false;
  bool with_flops = false;
  bool with_modules = false;
  std::string output_trace_dir;  // empty: no files, the summary is only logged
  double peak_tflops = 0.0;      // per rank, for MFU; 0: no MFU
  int64_t row_limit = 20;
  int64_t clock_sync_rounds = 20;
  int32_t test_straggler_rank = -1;  // test only: this rank sleeps ...
  int64_t test_straggler_ms = 0;     // ... this long in every step_begin
};

// Reads and checks the options; throws sdk::Error(INVALID_ARGUMENT).
ProfilerConfig read_config(const accel::sdk::Services& services);

// Parses "cpu,cuda" (any order, spaces allowed) into config.cpu/.cuda;
// throws sdk::Error(INVALID_ARGUMENT) naming an unknown activity.
void parse_activities(const std::string& text, ProfilerConfig& config);

// Creates `dir` if needed and proves it writable (a probe file); throws
// sdk::Error(INVALID_ARGUMENT) with the reason when it is not.
void require_writable_dir(const std::string& dir, int32_t rank);

}  // namespace accel::profiler
