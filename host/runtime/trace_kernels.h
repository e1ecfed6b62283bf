// Device kernels for the trace services (accel/trace.h,
// ACCEL_TRACE_DETAIL_KERNELS): a LibTorch Kineto profiler session
// (torch::autograd::profiler::enableProfiler / disableProfiler, CUPTI on a
// CUDA rank) runs while a capturing plugin asks for kernels; when a capture
// or detail setting changes, the session is stopped and what it recorded is
// turned into BEGIN/END events on device tracks and delivered (the device
// reports after the fact, so delivery is late; timestamps and steps are the
// kernels' own).
//
// Structure, CPU and CUDA alike: KinetoSession records with the activities
// it is given; kineto_ranges converts its results of one device type (the
// clock, the step, the track, the detail); range_edges orders them into a
// BEGIN/END sequence that nests LIFO per track. The host runs the session
// with ActivityType::CUDA and converts c10::kCUDA events; the tests run the
// same session with ActivityType::CPU and convert c10::kCPU events (no GPU
// here), which exercises every line of the conversion.
//
// Thread-safety: a session is started and stopped on one thread (Kineto's
// state is the enabling thread's; the trace services call it from the loop
// thread). note_kernel_step is called from any emitting thread.
#pragma once

#include <torch/csrc/autograd/profiler_kineto.h>

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace accel::runtime {

// From this step's first event on (at ts_ns, CLOCK_MONOTONIC) the rank ran
// `step`: what stamps a kernel recorded earlier with its step.
struct StepMark {
  int64_t ts_ns = 0;
  int64_t step = -1;
};

// One range recorded by Kineto, on this rank's CLOCK_MONOTONIC.
struct KinetoRange {
  std::string name;
  std::string detail;   // "device=0; stream=7; correlation=12" (+ shapes for CPU ops)
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
  int64_t step = -1;    // from the marks; -1 before the first
  int32_t device = -1;  // device index (-1: the host)
  int64_t track = 0;    // CUDA stream id, or the recording thread for CPU ops
};

// One BEGIN or END of a range in delivery order.
struct RangeEdge {
  bool begin = true;
  size_t range = 0;  // index into the ranges
  int64_t ts_ns = 0;
};

// CLOCK_REALTIME minus CLOCK_MONOTONIC now (Kineto stamps with the former,
// c10::getTime), from the tightest of a few bracketed readings.
int64_t realtime_minus_monotonic_ns();

// The events of `device_type` among Kineto's results, as ranges sorted by
// (track, begin, longer first); hidden and zero-length-name events are left
// out. `clock_offset_ns` is realtime_minus_monotonic_ns() of the session.
std::vector<KinetoRange> kineto_ranges(const std::vector<torch::autograd::profiler::KinetoEvent>& events,
                                       c10::DeviceType device_type, int64_t clock_offset_ns,
                                       const std::vector<StepMark>& marks);

// BEGIN/END edges of sorted ranges, per track in time order, nested LIFO: a
// range that overlaps its predecessor's end without ending inside it is
// clipped to that end (a device track's ranges never overlap; a thread's nest).
std::vector<RangeEdge> range_edges(std::vector<KinetoRange>& ranges);

// Whether the host's kernel session records now (update_kernel_capture
// started it and no drain or update stopped it since).
bool kernel_capture_running();

// A Kineto profiler session with the given activities.
class KinetoSession {
 public:
  explicit KinetoSession(std::set<torch::profiler::impl::ActivityType> activities, bool shapes = false);
  ~KinetoSession();  // stops a session still running, discarding its events
  KinetoSession(const KinetoSession&) = delete;
  KinetoSession& operator=(const KinetoSession&) = delete;
  // Stops recording; the events, and the clock offset taken at the stop.
  std::unique_ptr<torch::autograd::profiler::ProfilerResult> stop();
  int64_t clock_offset_ns() const { return clock_offset_ns_; }

 private:
  bool running_ = false;
  int64_t clock_offset_ns_ = 0;
};

}  // namespace accel::runtime
