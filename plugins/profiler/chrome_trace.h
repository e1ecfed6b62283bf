// Chrome Trace Event Format output (what chrome://tracing, Perfetto and
// torch.profiler's export_chrome_trace use): a JSON object with a
// "traceEvents" array. Ranges become complete events ("ph": "X", ts and dur
// in microseconds), instants "i", counters "C", names of processes (one per
// rank) and threads "M"; "pid" is the rank, "tid" the host's thread number
// (or a device stream's track). Events are written in time order, parents
// before children, so every track's timestamps are monotonic.
//
// What goes into "args" follows the options: step, unit, micro-batch and
// bytes always; the host's detail (peers, sequence numbers, labels) for
// ranges; operator shapes and dtypes only with record_shapes; the call path
// with with_stack; the unit name as "module" with with_modules; FLOPs with
// with_flops. Pure functions; no threads.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "timeline.h"

namespace accel::profiler {

struct TraceStyle {
  int32_t rank = 0;
  bool record_shapes = false;
  bool with_stack = false;
  bool with_modules = false;
  bool with_flops = false;
  std::vector<std::string> unit_names;  // module names by unit index
  // Maps this rank's CLOCK_MONOTONIC nanoseconds to the trace's clock (the
  // identity for a rank's own file, the alignment for the merged one).
  std::function<double(int64_t)> to_trace_ns = [](int64_t ns) { return static_cast<double>(ns); };
};

// JSON string literal of `text` (quotes included).
std::string json_string(const std::string& text);
// Microseconds as JSON, from nanoseconds (three decimals).
std::string json_us(double ns);

// The comma-separated traceEvents of one rank (no brackets), in time order.
std::string trace_events_json(const Timeline& timeline, const TraceStyle& style);

// A whole trace file: {"traceEvents": [...], "displayTimeUnit": "ms",
// "otherData": {other_data}} from comma-separated event fragments.
std::string trace_document(const std::vector<std::string>& event_fragments, const std::string& other_data_json);

// Writes `text` to `path` through a temporary file and a rename, so a reader
// never sees half a trace; false with *error set when it could not.
bool write_file_atomically(const std::string& path, const std::string& text, std::string* error);

}  // namespace accel::profiler
