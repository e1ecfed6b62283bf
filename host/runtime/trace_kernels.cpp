// Device kernels through LibTorch's Kineto profiler (see trace_kernels.h),
// and the host's kernel session: started by update_kernel_capture on a CUDA
// rank while a capturing plugin asks ACCEL_TRACE_DETAIL_KERNELS, drained
// (stopped, converted, delivered) before every capture or detail change.
//
// What ran where (no GPU on the build machine): the session and the
// conversion run in the tests with ActivityType::CPU and c10::kCPU events;
// this glue runs there with ActivityType::CUDA on a rank declared CUDA,
// recording nothing; real kernels have never gone through it
// (plugins/profiler/README.md).
#include "host/runtime/trace_kernels.h"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>
#include <utility>

#include "host/runtime/host_context.h"
#include "host/runtime/memory_services.h"
#include "host/runtime/service_support.h"
#include "host/util/log.h"

namespace accel::runtime {

namespace {

int64_t clock_ns(clockid_t clock) {
  timespec now{};
  clock_gettime(clock, &now);
  return static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

// "[2, 3], [3, 4]" and "float, float", as the operator callback writes them.
std::string describe_shapes(const torch::autograd::profiler::KinetoEvent& e) {
  std::ostringstream shapes, dtypes;
  const auto all_shapes = e.shapes();
  for (size_t i = 0; i < all_shapes.size(); ++i) {
    shapes << (i ? ", [" : "[");
    for (size_t d = 0; d < all_shapes[i].size(); ++d) shapes << (d ? ", " : "") << all_shapes[i][d];
    shapes << ']';
  }
  const auto all_dtypes = e.dtypes();
  for (size_t i = 0; i < all_dtypes.size(); ++i) dtypes << (i ? ", " : "") << all_dtypes[i];
  return "shapes=" + shapes.str() + "; dtypes=" + dtypes.str();
}

int64_t step_at(const std::vector<StepMark>& marks, int64_t ts_ns) {
  // The last mark at or before ts (marks are in time order).
  const auto after = std::upper_bound(marks.begin(), marks.end(), ts_ns,
                                      [](int64_t ts, const StepMark& m) { return ts < m.ts_ns; });
  return after == marks.begin() ? -1 : std::prev(after)->step;
}

}  // namespace

int64_t realtime_minus_monotonic_ns() {
  int64_t best_width = std::numeric_limits<int64_t>::max();
  int64_t offset = 0;
  for (int i = 0; i < 5; ++i) {
    const int64_t before = clock_ns(CLOCK_MONOTONIC);
    const int64_t real = clock_ns(CLOCK_REALTIME);
    const int64_t after = clock_ns(CLOCK_MONOTONIC);
    if (after - before < best_width) {
      best_width = after - before;
      offset = real - (before + (after - before) / 2);
    }
  }
  return offset;
}

std::vector<KinetoRange> kineto_ranges(const std::vector<torch::autograd::profiler::KinetoEvent>& events,
                                       c10::DeviceType device_type, int64_t clock_offset_ns,
                                       const std::vector<StepMark>& marks) {
  std::vector<KinetoRange> ranges;
  for (const auto& e : events) {
    if (e.deviceType() != device_type || e.isHiddenEvent() || e.name().empty()) continue;
    KinetoRange r;
    r.name = e.name();
    r.begin_ns = static_cast<int64_t>(e.startNs()) - clock_offset_ns;
    r.end_ns = std::max(r.begin_ns, static_cast<int64_t>(e.endNs()) - clock_offset_ns);
    r.step = step_at(marks, r.begin_ns);
    const bool on_device = device_type != c10::kCPU;
    r.device = on_device ? e.deviceIndex() : -1;
    r.track = on_device ? e.deviceResourceId() : static_cast<int64_t>(e.startThreadId());
    if (on_device) {
      r.detail = "device=" + std::to_string(r.device) + "; stream=" + std::to_string(r.track) +
                 "; correlation=" + std::to_string(e.correlationId());
    } else if (e.hasShapes() && !e.shapes().empty()) {
      r.detail = describe_shapes(e);
    }
    ranges.push_back(std::move(r));
  }
  std::stable_sort(ranges.begin(), ranges.end(), [](const KinetoRange& a, const KinetoRange& b) {
    if (a.device != b.device) return a.device < b.device;
    if (a.track != b.track) return a.track < b.track;
    if (a.begin_ns != b.begin_ns) return a.begin_ns < b.begin_ns;
    return a.end_ns > b.end_ns;
  });
  return ranges;
}

std::vector<RangeEdge> range_edges(std::vector<KinetoRange>& ranges) {
  std::vector<RangeEdge> edges;
  edges.reserve(2 * ranges.size());
  std::vector<size_t> open;  // the current track's open ranges, innermost last
  const auto close_until = [&](int64_t ts) {
    while (!open.empty() && ranges[open.back()].end_ns <= ts) {
      edges.push_back({false, open.back(), ranges[open.back()].end_ns});
      open.pop_back();
    }
  };
  for (size_t i = 0; i < ranges.size(); ++i) {
    KinetoRange& r = ranges[i];
    if (i > 0 && (ranges[i - 1].device != r.device || ranges[i - 1].track != r.track)) {
      close_until(std::numeric_limits<int64_t>::max());  // a new track
    }
    close_until(r.begin_ns);
    if (!open.empty()) r.end_ns = std::min(r.end_ns, ranges[open.back()].end_ns);  // nests in its parent
    edges.push_back({true, i, r.begin_ns});
    open.push_back(i);
  }
  close_until(std::numeric_limits<int64_t>::max());
  return edges;
}

KinetoSession::KinetoSession(std::set<torch::profiler::impl::ActivityType> activities, bool shapes) {
  using torch::profiler::impl::ProfilerConfig;
  using torch::profiler::impl::ProfilerState;
  const ProfilerConfig config(ProfilerState::KINETO, /*report_input_shapes=*/shapes);
  torch::autograd::profiler::prepareProfiler(config, activities);
  torch::autograd::profiler::enableProfiler(config, activities);
  running_ = true;
}

KinetoSession::~KinetoSession() {
  if (!running_) return;
  try {
    (void)stop();
  } catch (...) {
    // Discarded either way.
  }
}

std::unique_ptr<torch::autograd::profiler::ProfilerResult> KinetoSession::stop() {
  running_ = false;
  auto result = torch::autograd::profiler::disableProfiler();
  clock_offset_ns_ = realtime_minus_monotonic_ns();
  return result;
}

// ------------------------------- the host's -------------------------------
namespace {

struct KernelCapture {
  std::mutex mutex;  // guards everything below
  std::unique_ptr<KinetoSession> session;
  std::vector<StepMark> marks;
  bool warned = false;
  // A handle per (device, stream): what AccelTraceEvent.stream carries.
  std::map<std::pair<int32_t, int64_t>, std::unique_ptr<AccelStreamOpaque>> streams;
};

KernelCapture& kernels() {
  static KernelCapture capture;
  return capture;
}

std::atomic<bool> g_recording{false};
std::atomic<int64_t> g_last_step{std::numeric_limits<int64_t>::min()};

AccelStream stream_handle(int32_t device, int64_t stream) {
  KernelCapture& k = kernels();
  std::lock_guard<std::mutex> lock(k.mutex);
  auto& handle = k.streams[{device, stream}];
  if (!handle) handle = std::make_unique<AccelStreamOpaque>(AccelStreamOpaque{ACCEL_STREAM_COMPUTE, true});
  return handle.get();
}

}  // namespace

bool kernel_capture_running() { return g_recording.load(std::memory_order_relaxed); }

void note_kernel_step(int64_t ts_ns, int64_t step) noexcept {
  if (!g_recording.load(std::memory_order_relaxed) || g_last_step.load(std::memory_order_relaxed) == step) return;
  try {
    KernelCapture& k = kernels();
    std::lock_guard<std::mutex> lock(k.mutex);
    if (!k.session) return;
    k.marks.push_back({ts_ns, step});
    g_last_step.store(step, std::memory_order_relaxed);
  } catch (...) {
  }
}

void update_kernel_capture(HostContext& context, bool wanted) {
  KernelCapture& k = kernels();
  std::unique_ptr<KinetoSession> stopped;
  {
    std::lock_guard<std::mutex> lock(k.mutex);
    wanted = wanted && context.identity.device.device_type == kDLCUDA;  // a CPU rank has no kernels
    if (wanted && !k.session) {
      try {
        k.session = std::make_unique<KinetoSession>(
            std::set<torch::profiler::impl::ActivityType>{torch::profiler::impl::ActivityType::CUDA});
        k.marks.assign(1, StepMark{monotonic_ns(), context.step.load()});
        g_last_step.store(k.marks[0].step, std::memory_order_relaxed);
        g_recording.store(true, std::memory_order_relaxed);
      } catch (const std::exception& e) {
        if (!k.warned) log::warn(std::string("trace: no device kernels (Kineto did not start: ") + e.what() + ")");
        k.warned = true;
      }
    } else if (!wanted && k.session) {
      g_recording.store(false, std::memory_order_relaxed);
      stopped = std::move(k.session);
    }
  }
  stopped.reset();  // discarded: drain_kernel_capture delivers, this only stops
}

void drain_kernel_capture(HostContext& context) noexcept {
  try {
    KernelCapture& k = kernels();
    std::unique_ptr<KinetoSession> session;
    std::vector<StepMark> marks;
    {
      std::lock_guard<std::mutex> lock(k.mutex);
      if (!k.session) return;
      g_recording.store(false, std::memory_order_relaxed);
      session = std::move(k.session);
      marks = std::move(k.marks);
    }
    const auto result = session->stop();
    if (!result) return;
    std::vector<KinetoRange> ranges = kineto_ranges(result->events(), c10::kCUDA, session->clock_offset_ns(), marks);
    // Outside the lock: a hook receiving these may change its capture.
    for (const RangeEdge& edge : range_edges(ranges)) {
      const KinetoRange& r = ranges[edge.range];
      TraceEventFields fields;
      fields.type = edge.begin ? ACCEL_TRACE_BEGIN : ACCEL_TRACE_END;
      fields.name = r.name.c_str();
      fields.category = "kernel";
      fields.stream = stream_handle(r.device, r.track);
      fields.detail = r.detail.c_str();
      fields.timestamp_ns = edge.ts_ns;
      fields.step = r.step;
      emit_trace_event(context, fields);
    }
  } catch (...) {
    // Emitting never fails (accel/trace.h): what could not be read is lost.
  }
}

}  // namespace accel::runtime
