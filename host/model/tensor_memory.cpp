// Counting CPU allocator and the live-tensor-bytes counter (see
// tensor_memory.h).
#include "host/model/tensor_memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>

namespace accel::model {
namespace {

std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};
std::atomic<bool> g_installed{false};

void raise_peak(int64_t live) {
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (live > peak && !g_peak.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}

// c10's own allocation (c10::alloc_cpu: aligned, optionally huge pages) with
// the block's usable size added to the counter while it lives. The DataPtr's
// context is the data itself, so raw_allocate works as with c10's allocator.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t bytes) override {
    void* data = c10::alloc_cpu(bytes);
    if (data != nullptr) note_tensor_bytes(static_cast<int64_t>(malloc_usable_size(data)));
    return c10::DataPtr(data, data, &release, c10::Device(c10::DeviceType::CPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

 private:
  static void release(void* data) {
    if (data == nullptr) return;
    note_tensor_bytes(-static_cast<int64_t>(malloc_usable_size(data)));
    c10::free_cpu(data);
  }
};

}  // namespace

void install_counting_cpu_allocator() {
  if (g_installed.exchange(true)) return;
  static CountingCpuAllocator allocator;  // never destroyed before the tensors it made
  // Priority above c10's default (0), so nothing later replaces it silently.
  c10::SetCPUAllocator(&allocator, /*priority=*/1);
}

bool counting_cpu_allocator_installed() { return g_installed.load(); }

void note_tensor_bytes(int64_t delta) {
  const int64_t live = g_live.fetch_add(delta, std::memory_order_relaxed) + delta;
  if (delta > 0) raise_peak(live);
}

TensorMemory tensor_memory() { return TensorMemory{g_live.load(), g_peak.load()}; }

void reset_tensor_memory_peak() { g_peak.store(g_live.load()); }

}  // namespace accel::model
