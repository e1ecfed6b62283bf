// The end-of-run table of a rank's profile, like torch.profiler's
// key_averages().table(sort_by="self_cpu_time_total"): one row per range or
// operator name, with calls, self and total time, and with with_flops the
// FLOPs; then, with with_flops, the FLOPs, TFLOP/s and MFU of every
// recorded step against the peak given as an option.
//
// Pure functions; no threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "timeline.h"

namespace accel::profiler {

struct StepFlops {
  int64_t step = 0;
  double seconds = 0.0;
  double flops = 0.0;
  double mfu = 0.0;  // 0 without a peak
};

// FLOPs per recorded step (count_flops must have run): the counted products
// whose step is the step's. `peak_tflops` 0: no MFU.
std::vector<StepFlops> flops_per_step(const Timeline& timeline, double peak_tflops);

// The table, `rows` rows at most, as printed and saved.
std::string summary_table(const Timeline& timeline, int32_t rank, size_t rows, bool with_flops,
                          const std::vector<StepFlops>& steps);

}  // namespace accel::profiler
