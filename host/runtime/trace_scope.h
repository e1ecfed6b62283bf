// The host's own trace ranges (accel/trace.h): TraceRange opens a range on
// this thread when constructed and closes it when destroyed, so a range ends
// however its scope is left (an exception included). The trainer, the hook
// dispatcher and the comm and checkpoint services name their work with it:
// "step", "forward"/"backward" per unit, each plugin hook under the
// plugin's name, collectives with bytes and peers, checkpoint phases.
//
// Invariant: a range whose BEGIN was not emitted (nobody captured) emits no
// END either; capture turned on or off inside a range leaves a lone END or
// BEGIN, which consumers drop (the profiler matches ranges per thread). The
// END repeats the BEGIN's detail. When no plugin captures, construction
// costs one locked check and builds no string (the detail is produced by a
// callable, only when capturing). What is known only once the work started
// (a collective's sequence number) goes on the END with set_end_detail, so
// the range still begins before the work does; consumers take a range's
// detail and bytes from its END when its BEGIN has none.
//
// Thread-safety: a TraceRange belongs to the thread that made it (ranges
// nest LIFO per thread); any number of threads may hold their own.
#pragma once

#include <accel/accel.h>

#include <cstdint>
#include <string>
#include <utility>

#include "host/runtime/service_support.h"

namespace accel::runtime {

class HostContext;

class TraceRange {
 public:
  // `name`, `category`, `source` must outlive the range (string literals or
  // a plugin's name); `detail` is called only when the range is recorded.
  template <typename Detail>
  TraceRange(HostContext* context, const char* name, const char* category, const char* source, Detail&& detail,
             int32_t unit = -1, int32_t micro_batch = -1, int64_t bytes = 0)
      : context_(context) {
    if (context_ == nullptr || !trace_capturing(*context_)) {
      context_ = nullptr;
      return;
    }
    fields_.name = name;
    fields_.category = category;
    fields_.source = source;
    fields_.unit = unit;
    fields_.micro_batch = micro_batch;
    fields_.bytes = bytes;
    detail_ = std::forward<Detail>(detail)();
    fields_.detail = detail_.empty() ? nullptr : detail_.c_str();
    fields_.type = ACCEL_TRACE_BEGIN;
    emit_trace_event(*context_, fields_);
  }
  TraceRange(HostContext* context, const char* name, const char* category = "host", int32_t unit = -1,
             int32_t micro_batch = -1)
      : TraceRange(context, name, category, "host", [] { return std::string(); }, unit, micro_batch) {}
  ~TraceRange() {
    if (context_ == nullptr) return;
    fields_.type = ACCEL_TRACE_END;
    emit_trace_event(*context_, fields_);
  }
  // Whether this range was emitted (someone captured when it opened).
  bool recording() const { return context_ != nullptr; }
  // The detail and bytes the END carries (call only when recording()).
  void set_end_detail(std::string detail, int64_t bytes) {
    detail_ = std::move(detail);
    fields_.detail = detail_.empty() ? nullptr : detail_.c_str();
    fields_.bytes = bytes;
  }
  TraceRange(const TraceRange&) = delete;
  TraceRange& operator=(const TraceRange&) = delete;

 private:
  HostContext* context_;
  TraceEventFields fields_;
  std::string detail_;
};

}  // namespace accel::runtime
