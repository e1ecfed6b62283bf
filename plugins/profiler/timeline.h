// A rank's recorded events turned into what a trace shows: ranges (BEGIN and
// END of one thread or stream paired into slices with a duration, a parent,
// their self time and call path) and points (instants, counters).
//
// Invariant: slices of one track nest strictly (they come from LIFO ranges);
// a BEGIN without its END, or an END without its BEGIN (capture switched
// inside a range, or an unrecorded step's half), is dropped, never guessed.
// A BEGIN without detail or bytes takes its END's (trace_scope.h's
// set_end_detail).
// Pure data; no threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "event_buffer.h"

namespace accel::profiler {

struct Slice {
  size_t begin = 0;       // index of its BEGIN in Timeline::events
  int64_t ts_ns = 0;
  int64_t dur_ns = 0;
  int64_t self_ns = 0;    // dur minus its children's
  int parent = -1;        // index in Timeline::slices, -1 at the top
  int depth = 0;
  uint64_t track = 0;
  int32_t unit = -1;      // the unit of this range or of the nearest enclosing one
  double flops = 0.0;     // matmul/attention FLOPs (flops.h), when counted
  bool counted = false;   // its flops count towards the step (no counted ancestor)
};

struct Timeline {
  std::vector<Event> events;   // every kept event, per track in time order
  std::vector<Slice> slices;   // sorted by (ts, longer first)
  std::vector<size_t> points;  // indices of INSTANT and COUNTER events
  const Event& begin_of(const Slice& s) const { return events[s.begin]; }
  // "step > forward > aten::linear > aten::addmm": the call path of a slice.
  std::string stack_of(size_t slice) const;
};

Timeline build_timeline(std::vector<Event> events);

// The value of `key` in a "key=value; key=value" detail, or "" if absent.
std::string detail_value(const std::string& detail, const std::string& key);

}  // namespace accel::profiler
