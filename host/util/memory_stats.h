// Process memory figures for progress lines, metrics and the memory ledger:
// what the kernel says is resident, and what the C allocator holds.
// Thread-safety: every function may be called from any thread.
#pragma once

#include <cstdint>

namespace accel {

// Peak resident set size of this process so far, in bytes (getrusage).
int64_t peak_rss_bytes();

// Resident memory now, from /proc/self/status (zeros where unreadable).
struct ResidentMemory {
  int64_t total = 0;   // VmRSS
  int64_t anon = 0;    // RssAnon: heap, mmapped buffers, stacks
  int64_t file = 0;    // RssFile: code and read-only data of the binary and libraries
  int64_t shmem = 0;   // RssShmem: shared memory (MPI's shared-memory transport)
};
ResidentMemory resident_memory();

// What the C allocator holds: bytes handed out and bytes kept free for
// reuse (not returned to the OS). glibc: mallinfo2 over every arena; a
// preloaded jemalloc: its stats.allocated and stats.resident - allocated.
struct MallocMemory {
  int64_t in_use = 0;
  int64_t cached = 0;
  const char* allocator = "glibc";
};
MallocMemory malloc_memory();

// Resident anonymous memory that is not the C allocator's, recorded once
// before the model's first tensor (after MPI and the libraries are up):
// relocated library data, thread stacks, direct mappings of MPI and
// LibTorch. The ledger counts it as part of the runtime. 0 until recorded.
void record_startup_memory();
int64_t startup_non_heap_anon_bytes();

}  // namespace accel
