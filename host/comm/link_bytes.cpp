// Per-link byte counters (see link_bytes.h).
#include "host/comm/link_bytes.h"

#include <atomic>

namespace accel::comm {
namespace {

std::atomic<int64_t> g_sent[3]{};
std::atomic<int64_t> g_taken[3]{};

int64_t take(int i) {
  const int64_t now = g_sent[i].load(std::memory_order_relaxed);
  return now - g_taken[i].exchange(now, std::memory_order_relaxed);
}

}  // namespace

void count_sent(Link link, int64_t bytes) {
  g_sent[static_cast<int>(link)].fetch_add(bytes, std::memory_order_relaxed);
}

LinkBytes link_bytes_sent() {
  return {g_sent[0].load(std::memory_order_relaxed), g_sent[1].load(std::memory_order_relaxed),
          g_sent[2].load(std::memory_order_relaxed)};
}

LinkBytes take_link_bytes_sent() { return {take(0), take(1), take(2)}; }

}  // namespace accel::comm
