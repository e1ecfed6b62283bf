// The profiler's event store: what the trace_event hook copies out of each
// borrowed AccelTraceEvent, kept in one buffer per emitting thread so the
// hook never waits on another thread.
//
// Invariant: events of one thread stay in emission order (what pairing a
// BEGIN with its END relies on). A thread appends only to its own buffer,
// under that buffer's own mutex, which only drain() (the loop thread, at
// step end) contends for; so the hook is non-blocking in practice.
//
// Thread-safety: append() from any thread; drain() from one thread.
#pragma once

#include <accel/accel.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace accel::profiler {

struct Event {
  AccelTraceEventType type = ACCEL_TRACE_INSTANT;
  std::string name;
  std::string category;
  std::string source;
  std::string detail;
  int64_t ts_ns = 0;
  int64_t step = -1;
  int32_t unit = -1;
  int32_t micro_batch = -1;
  double value = 0.0;
  uint64_t thread = 0;   // host thread number, or a device stream's track
  bool device = false;   // a range timed on a stream
  int64_t bytes = 0;
};

Event copy_event(const AccelTraceEvent& event);

class EventBuffer {
 public:
  EventBuffer();
  ~EventBuffer();
  EventBuffer(const EventBuffer&) = delete;
  EventBuffer& operator=(const EventBuffer&) = delete;

  void append(const AccelTraceEvent& event);
  // Every event appended so far, thread by thread (each in order); the
  // buffers are left empty.
  std::vector<Event> drain();

 private:
  struct ThreadBuffer {
    std::mutex mutex;
    std::vector<Event> events;
  };
  ThreadBuffer& mine();

  const uint64_t id_;  // tells this buffer's thread-local slots from an earlier one's
  std::mutex threads_mutex_;
  std::vector<std::unique_ptr<ThreadBuffer>> threads_;
};

}  // namespace accel::profiler
