// Process memory figures for progress lines and metrics.
#pragma once

#include <cstdint>

namespace accel {

// Peak resident set size of this process so far, in bytes (getrusage).
int64_t peak_rss_bytes();

}  // namespace accel
