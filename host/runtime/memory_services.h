// Accounted memory for plugins (accel/memory.h): the per-rank ledger of bytes
// by place and category, and the concrete types behind the ABI's opaque
// AccelBuffer, AccelEvent and AccelStream handles.
//
// Invariants: every live AccelBuffer is registered (by handle and by the
// address of its first byte, so find_extent can tell whether a tensor lies
// inside the memory it points into) in its context's
// MemoryAccounting and counted once in counters(place, category) and in
// counters(place, ACCEL_MEMORY_ALL); deallocate, stream_destroy and
// event_destroy refuse a handle the ledger does not hold, so a double free or
// a stray pointer is an INVALID_ARGUMENT instead of a crash. ALL's peak is the
// peak of the total, not the sum of the categories' peaks.
//
// Buffers are at::Tensor byte storage (CPU; CUDA when the rank's device is
// CUDA), over-allocated by the requested alignment. On CPU-only runs streams
// and events are tokens: every operation is synchronous, so waits return at
// once; an event records the host time it was recorded at, which is exactly
// when a synchronous stream reached it.
//
// Thread-safety: MemoryAccounting is internally locked; every memory service
// may be called from any thread.
#pragma once

#include <ATen/ATen.h>
#include <accel/accel.h>

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "host/runtime/tensor_views.h"

// ---------------------------------------------------------------------------
// The ABI's opaque handles (declared in accel/memory.h, global namespace)
// ---------------------------------------------------------------------------

struct AccelBuffer {
  at::Tensor storage;                  // owns the bytes (kByte, over-allocated)
  accel::runtime::TensorView view;     // the compact view handed to the plugin
  AccelMemoryPlace place = ACCEL_MEMORY_DEVICE;
  AccelMemoryCategory category = ACCEL_MEMORY_OTHER;
  int64_t bytes = 0;                   // accounted: the view's bytes
  std::string label;
  std::string owner;                   // the allocating plugin ("" = host)
};

struct AccelEvent {
  int64_t recorded_ns = -1;  // CPU: monotonic time of the last record; -1 never
};

struct AccelStreamOpaque {
  AccelStreamRole role = ACCEL_STREAM_COMPUTE;
  bool host_owned = false;  // from stream_get: never destroyed
};

namespace accel::runtime {

// The accounted bytes of one live buffer, as the extent checks quote them.
struct BufferExtent {
  uintptr_t begin = 0;  // the view's first byte
  int64_t bytes = 0;    // accounted bytes (the view's)
  DLDataType dtype{};
  int64_t numel = 0;
  std::string label;
  std::string owner;    // allocating plugin ("" = host)
};

struct MemoryCounters {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t num_allocs = 0;
};

class MemoryAccounting {
 public:
  static constexpr int kNumPlaces = 3;      // AccelMemoryPlace values
  static constexpr int kNumCategories = 8;  // AccelMemoryCategory values, ALL = 0

  // The ledger. The host records its own allocations here too, so stats show
  // the whole rank (plugins' buffers are recorded by allocate/deallocate).
  void record_allocate(AccelMemoryPlace place, AccelMemoryCategory category, int64_t bytes);
  void record_free(AccelMemoryPlace place, AccelMemoryCategory category, int64_t bytes);
  // ACCEL_MEMORY_ALL gives the place's totals.
  MemoryCounters counters(AccelMemoryPlace place, AccelMemoryCategory category) const;
  void reset_peak();
  // "params 1.00 MiB, grads 1.00 MiB, ..." of the non-empty categories of
  // `place`, for out-of-memory messages.
  std::string describe_usage(AccelMemoryPlace place) const;

  // Handle registry.
  void add_buffer(AccelBuffer* buffer);
  bool remove_buffer(AccelBuffer* buffer);  // false: not ours (or freed)
  void add_stream(AccelStreamOpaque* stream);
  bool remove_stream(AccelStreamOpaque* stream);
  bool has_stream(const AccelStreamOpaque* stream) const;
  void add_event(AccelEvent* event);
  bool remove_event(AccelEvent* event);
  bool has_event(const AccelEvent* event) const;
  // The live buffer whose accounted bytes [begin, begin + bytes) contain
  // `address` (a zero-byte buffer contains only its own begin), if any.
  // O(log buffers): the collectives ask it for every tensor they move.
  std::optional<BufferExtent> find_extent(const void* address) const;

  // Buffers `owner` allocated and has not freed, and their bytes; the
  // registry checks it after a plugin's teardown.
  int64_t live_buffers(std::string_view owner) const;
  int64_t live_bytes(std::string_view owner) const;
  // Frees every buffer `owner` leaked (after its teardown), returning how
  // many it freed.
  int64_t free_leaked(std::string_view owner);

  ~MemoryAccounting();

 private:
  MemoryCounters& slot(AccelMemoryPlace place, AccelMemoryCategory category);

  mutable std::mutex mutex_;
  std::array<std::array<MemoryCounters, kNumCategories>, kNumPlaces> counters_{};
  std::set<AccelBuffer*> buffers_;
  std::map<uintptr_t, AccelBuffer*> by_address_;  // view begin -> buffer
  std::set<const AccelStreamOpaque*> streams_;
  std::set<const AccelEvent*> events_;
};

// "params", "grads", ... for messages.
const char* category_name(AccelMemoryCategory category);
const char* place_name(AccelMemoryPlace place);

}  // namespace accel::runtime
