// Process memory figures (see memory_stats.h).
#include "host/util/memory_stats.h"

#include <sys/resource.h>

namespace accel {

int64_t peak_rss_bytes() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace accel
