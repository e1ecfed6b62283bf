// Process memory figures (see memory_stats.h).
#include "host/util/memory_stats.h"

#include <dlfcn.h>
#include <malloc.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>

namespace accel {

int64_t peak_rss_bytes() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

ResidentMemory resident_memory() {
  ResidentMemory out;
  std::FILE* status = std::fopen("/proc/self/status", "r");
  if (status == nullptr) return out;
  char line[256];
  while (std::fgets(line, sizeof(line), status) != nullptr) {
    long long kib = 0;
    if (std::sscanf(line, "VmRSS: %lld", &kib) == 1) out.total = kib * 1024;
    if (std::sscanf(line, "RssAnon: %lld", &kib) == 1) out.anon = kib * 1024;
    if (std::sscanf(line, "RssFile: %lld", &kib) == 1) out.file = kib * 1024;
    if (std::sscanf(line, "RssShmem: %lld", &kib) == 1) out.shmem = kib * 1024;
  }
  std::fclose(status);
  return out;
}

namespace {

// jemalloc's control interface, when it is the process's malloc (preloaded
// or linked); null under glibc.
using Mallctl = int (*)(const char*, void*, size_t*, void*, size_t);
Mallctl find_mallctl() {
  static const auto fn = reinterpret_cast<Mallctl>(dlsym(RTLD_DEFAULT, "mallctl"));
  return fn;
}

}  // namespace

MallocMemory malloc_memory() {
  MallocMemory out;
  if (const Mallctl mallctl = find_mallctl()) {
    uint64_t epoch = 1;
    size_t size = sizeof(epoch);
    mallctl("epoch", &epoch, &size, &epoch, sizeof(epoch));  // refreshes the statistics
    size_t allocated = 0, resident = 0;
    size = sizeof(size_t);
    mallctl("stats.allocated", &allocated, &size, nullptr, 0);
    size = sizeof(size_t);
    mallctl("stats.resident", &resident, &size, nullptr, 0);
    out.allocator = "jemalloc";
    out.in_use = static_cast<int64_t>(allocated);
    out.cached = resident > allocated ? static_cast<int64_t>(resident - allocated) : 0;
    return out;
  }
  const struct mallinfo2 info = mallinfo2();
  out.in_use = static_cast<int64_t>(info.uordblks + info.hblkhd);
  out.cached = static_cast<int64_t>(info.fordblks);
  return out;
}

namespace {
std::atomic<int64_t> g_startup_non_heap_anon{0};
}  // namespace

void record_startup_memory() {
  const MallocMemory heap = malloc_memory();
  const int64_t anon = resident_memory().anon;
  g_startup_non_heap_anon.store(std::max<int64_t>(0, anon - heap.in_use - heap.cached));
}

int64_t startup_non_heap_anon_bytes() { return g_startup_non_heap_anon.load(); }

}  // namespace accel
