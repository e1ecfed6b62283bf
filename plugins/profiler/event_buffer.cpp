// Per-thread event buffers (see event_buffer.h).
#include "event_buffer.h"

#include <atomic>
#include <utility>

namespace accel::profiler {
namespace {

std::atomic<uint64_t> g_next_buffer_id{1};

// The calling thread's slot: which buffer it last registered with, and its
// ThreadBuffer there. Buffers are never freed before the EventBuffer is, and
// ids are never reused, so a stale slot is recognised by its id.
struct Slot {
  uint64_t owner = 0;
  void* buffer = nullptr;
};
thread_local Slot t_slot;

}  // namespace

Event copy_event(const AccelTraceEvent& e) {
  Event out;
  out.type = e.type;
  out.name = e.name ? e.name : "";
  out.category = e.category ? e.category : "";
  out.source = e.source ? e.source : "";
  out.detail = e.detail ? e.detail : "";
  out.ts_ns = e.timestamp_ns;
  out.step = e.step;
  out.unit = e.unit;
  out.micro_batch = e.micro_batch;
  out.value = e.value;
  out.thread = e.thread_id;
  out.device = e.stream != nullptr;
  if (out.device) {
    // Device ranges nest per stream: one track per stream.
    out.thread = 1000000u + (reinterpret_cast<uintptr_t>(e.stream) % 1000000u);
  }
  out.bytes = e.bytes;
  return out;
}

EventBuffer::EventBuffer() : id_(g_next_buffer_id.fetch_add(1)) {}
EventBuffer::~EventBuffer() = default;

EventBuffer::ThreadBuffer& EventBuffer::mine() {
  if (t_slot.owner == id_) return *static_cast<ThreadBuffer*>(t_slot.buffer);
  std::lock_guard<std::mutex> lock(threads_mutex_);
  threads_.push_back(std::make_unique<ThreadBuffer>());
  t_slot = Slot{id_, threads_.back().get()};
  return *threads_.back();
}

void EventBuffer::append(const AccelTraceEvent& event) {
  ThreadBuffer& buffer = mine();
  Event copy = copy_event(event);
  std::lock_guard<std::mutex> lock(buffer.mutex);
  buffer.events.push_back(std::move(copy));
}

std::vector<Event> EventBuffer::drain() {
  std::vector<Event> all;
  std::lock_guard<std::mutex> lock(threads_mutex_);
  for (const auto& thread : threads_) {
    std::lock_guard<std::mutex> buffer_lock(thread->mutex);
    for (Event& e : thread->events) all.push_back(std::move(e));
    thread->events.clear();
  }
  return all;
}

}  // namespace accel::profiler
