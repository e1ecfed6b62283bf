// The capture gate (trace_capture.h): turning a plugin's capture off waits
// for deliveries to it in progress on other threads, so a plugin that
// stopped capturing (and tears down next) is never called again; a hook may
// turn its own capture off without deadlocking. And the device kernel path
// (trace_kernels.h): LibTorch's Kineto session and the conversion of its
// results into nested BEGIN/END events, run here with the CPU activity (the
// host runs the same code with the CUDA one on a GPU rank).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "host/runtime/trace_capture.h"
#include "host/runtime/trace_kernels.h"
#include "tests/runtime/services_test_support.h"

namespace accel::runtime::testing {
namespace {

TEST(TraceCapture, TurningCaptureOffWaitsForADeliveryInProgress) {
  TraceCapture capture;
  capture.set("profiler", true);
  std::mutex mutex;
  std::condition_variable changed;
  bool entered = false, off_returned = false;
  std::atomic<bool> hook_done{false};
  bool hook_done_when_off_returned = false;

  std::thread delivering([&] {
    capture.deliver("profiler", [&] {
      std::unique_lock<std::mutex> lock(mutex);
      entered = true;
      changed.notify_all();
      // Stay inside the hook until set(off) returned, or long enough that it
      // would have: with the gate it cannot return before this hook does.
      changed.wait_for(lock, std::chrono::milliseconds(500), [&] { return off_returned; });
      hook_done = true;
    });
  });
  {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return entered; });
  }
  capture.set("profiler", false);
  hook_done_when_off_returned = hook_done.load();
  {
    std::lock_guard<std::mutex> lock(mutex);
    off_returned = true;
  }
  changed.notify_all();
  delivering.join();
  EXPECT_TRUE(hook_done_when_off_returned) << "set_capture(false) returned while the plugin's hook still ran";
  bool called = false;
  capture.deliver("profiler", [&] { called = true; });
  EXPECT_FALSE(called);
}

TEST(TraceCapture, AHookMayTurnItsOwnCaptureOff) {
  TraceCapture capture;
  capture.set("profiler", true);
  EXPECT_TRUE(capture.any());
  int calls = 0;
  capture.deliver("profiler", [&] {
    ++calls;
    capture.set("profiler", false);  // the profiler does this on the step's END
    capture.deliver("profiler", [&] { ++calls; });  // off: not delivered
  });
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(capture.captures("profiler"));
  EXPECT_FALSE(capture.any());
  capture.deliver("unknown", [&] { ++calls; });
  EXPECT_EQ(calls, 1);
}

TEST(TraceCapture, TwoHooksTurningOffAtOnceDoNotDeadlock) {
  TraceCapture capture;
  capture.set("profiler", true);
  std::mutex mutex;
  std::condition_variable changed;
  int inside = 0;
  const auto hook = [&] {
    capture.deliver("profiler", [&] {
      {
        std::unique_lock<std::mutex> lock(mutex);
        ++inside;
        changed.notify_all();
        changed.wait(lock, [&] { return inside == 2; });  // both inside before either turns off
      }
      capture.set("profiler", false);
    });
  };
  std::thread a(hook), b(hook);
  a.join();
  b.join();
  EXPECT_FALSE(capture.captures("profiler"));
}

// Through the services, as the registry delivers: emitters on four threads,
// a plugin that turns its capture off and then "tears down". No event may
// reach it afterwards.
class TraceCaptureServicesTest : public ServicesTest {};

TEST_F(TraceCaptureServicesTest, NoEventReachesAPluginAfterItsCaptureIsOff) {
  std::atomic<bool> torn_down{false};
  std::atomic<int64_t> delivered{0}, after_teardown{0};
  context.trace_listener = [&](const AccelTraceEvent&) {
    context.trace_capture.deliver("other", [&] {
      delivered.fetch_add(1);
      std::this_thread::yield();  // widen the window between the check and the hook's work
      if (torn_down.load()) after_teardown.fetch_add(1);
    });
  };
  const AccelTraceServices* trace = services->trace;
  for (int round = 0; round < 20; ++round) {
    torn_down = false;
    ASSERT_EQ(trace->set_capture(&other_host, true), ACCEL_OK);
    std::atomic<bool> stop{false};
    std::vector<std::thread> emitters;
    for (int t = 0; t < 4; ++t) {
      emitters.emplace_back([&] {
        while (!stop.load()) trace->instant(&host, "tick", nullptr);
      });
    }
    while (delivered.load() < (round + 1) * 100) std::this_thread::yield();
    ASSERT_EQ(trace->set_capture(&other_host, false), ACCEL_OK);
    torn_down = true;  // what a teardown frees, the hook must no longer touch
    for (int i = 0; i < 100; ++i) trace->instant(&host, "tick", nullptr);
    stop = true;
    for (std::thread& t : emitters) t.join();
  }
  EXPECT_EQ(after_teardown.load(), 0);
}

// ------------------------- Kineto, CPU activity --------------------------

int64_t monotonic_now() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

TEST(TraceKernels, KinetoResultsBecomeNestedRangesOnThisRanksClock) {
  const at::Tensor a = at::ones({2, 3}), b = at::ones({3, 4});
  const at::Tensor x = at::ones({5, 8}), w = at::ones({6, 8}), bias = at::ones({6});
  const int64_t before = monotonic_now();
  KinetoSession session({torch::profiler::impl::ActivityType::CPU}, /*shapes=*/true);
  (void)at::mm(a, b);
  const int64_t between = monotonic_now();
  (void)at::linear(x, w, bias);
  const auto result = session.stop();
  const int64_t after = monotonic_now();
  ASSERT_NE(result, nullptr);

  const std::vector<StepMark> marks = {{before, 5}, {between, 6}};
  std::vector<KinetoRange> ranges =
      kineto_ranges(result->events(), c10::kCPU, session.clock_offset_ns(), marks);
  const KinetoRange* mm = nullptr;
  const KinetoRange* linear = nullptr;
  const KinetoRange* addmm = nullptr;
  for (const KinetoRange& r : ranges) {
    EXPECT_GE(r.begin_ns, before - 1000) << r.name;  // Kineto's realtime stamps, mapped
    EXPECT_LE(r.end_ns, after + 1000) << r.name;
    EXPECT_LE(r.begin_ns, r.end_ns) << r.name;
    if (r.name == "aten::mm") mm = &r;
    if (r.name == "aten::linear") linear = &r;
    if (r.name == "aten::addmm") addmm = &r;
  }
  ASSERT_NE(mm, nullptr);
  ASSERT_NE(linear, nullptr);
  ASSERT_NE(addmm, nullptr);
  EXPECT_EQ(mm->detail, "shapes=[2, 3], [3, 4]; dtypes=float, float");
  EXPECT_EQ(mm->step, 5);
  EXPECT_EQ(linear->step, 6);
  EXPECT_EQ(mm->device, -1);
  EXPECT_EQ(addmm->track, linear->track);  // one thread
  EXPECT_GE(addmm->begin_ns, linear->begin_ns);
  EXPECT_LE(addmm->end_ns, linear->end_ns);

  // Replayed in edge order, every END closes the innermost open range of
  // its track, and addmm opens inside linear.
  const std::vector<RangeEdge> edges = range_edges(ranges);
  ASSERT_EQ(edges.size(), 2 * ranges.size());
  std::vector<size_t> open;
  int64_t last_ts = INT64_MIN;
  bool addmm_inside_linear = false;
  for (const RangeEdge& e : edges) {
    if (!open.empty() && ranges[open.back()].track == ranges[e.range].track) {
      EXPECT_GE(e.ts_ns, last_ts);
    }
    last_ts = e.ts_ns;
    if (e.begin) {
      if (ranges[e.range].name == "aten::addmm") {
        for (size_t o : open) addmm_inside_linear = addmm_inside_linear || ranges[o].name == "aten::linear";
      }
      open.push_back(e.range);
    } else {
      ASSERT_FALSE(open.empty());
      EXPECT_EQ(open.back(), e.range);
      open.pop_back();
    }
  }
  EXPECT_TRUE(open.empty());
  EXPECT_TRUE(addmm_inside_linear);

  // Only the asked device's events: a CPU session has no CUDA ones.
  EXPECT_TRUE(kineto_ranges(result->events(), c10::kCUDA, session.clock_offset_ns(), marks).empty());
}

KinetoRange make_range(const std::string& name, int64_t begin, int64_t end, int64_t track) {
  KinetoRange r;
  r.name = name;
  r.begin_ns = begin;
  r.end_ns = end;
  r.track = track;
  r.device = 0;
  return r;
}

TEST(TraceKernels, EdgesNestPerTrackAndClipAnOverlap) {
  // Sorted as kineto_ranges sorts: by track, begin, longer first.
  std::vector<KinetoRange> ranges = {
      make_range("a", 0, 100, 7), make_range("b", 10, 20, 7), make_range("c", 90, 150, 7),  // c overlaps a's end
      make_range("d", 200, 300, 7), make_range("k", 5, 15, 9)};
  const std::vector<RangeEdge> edges = range_edges(ranges);
  std::string order;
  for (const RangeEdge& e : edges) order += (e.begin ? "+" : "-") + ranges[e.range].name + " ";
  EXPECT_EQ(order, "+a +b -b +c -c -a +d -d +k -k ");
  EXPECT_EQ(ranges[2].end_ns, 100);  // clipped to its parent's end
}

TEST_F(TraceCaptureServicesTest, KernelsAskedOnACpuRankStartNoSession) {
  std::vector<std::string> names;
  context.trace_listener = [&](const AccelTraceEvent& e) {
    context.trace_capture.deliver("other", [&] { names.push_back(e.name); });
  };
  const AccelTraceServices* trace = services->trace;
  ASSERT_EQ(trace->set_capture(&other_host, true), ACCEL_OK);
  ASSERT_EQ(trace->set_detail(&other_host, ACCEL_TRACE_DETAIL_KERNELS), ACCEL_OK);
  EXPECT_FALSE(kernel_capture_running());
  (void)at::mm(at::ones({2, 2}), at::ones({2, 2}));
  ASSERT_EQ(trace->set_capture(&other_host, false), ACCEL_OK);
  EXPECT_TRUE(names.empty());  // a CPU rank has no kernels, and operators were not asked
  ASSERT_EQ(trace->set_detail(&other_host, 0), ACCEL_OK);
}

// The host's glue with the CUDA activity, on this machine without a GPU:
// Kineto starts with ActivityType::CUDA on a rank whose device is CUDA, runs
// while the plugin captures, and is drained when capture turns off; with no
// GPU it records no kernel, so only what it would deliver is checked.
TEST_F(TraceCaptureServicesTest, TheKernelSessionRunsWhileAskedOnACudaRank) {
  struct Delivered {
    std::string category, detail;
    bool has_stream;
  };
  std::vector<Delivered> kernels;
  context.trace_listener = [&](const AccelTraceEvent& e) {
    context.trace_capture.deliver("other", [&] {
      if (std::string(e.category) == "kernel") kernels.push_back({e.category, e.detail ? e.detail : "", e.stream != nullptr});
    });
  };
  context.identity.device = DLDevice{kDLCUDA, 0};
  const AccelTraceServices* trace = services->trace;
  ASSERT_EQ(trace->set_capture(&other_host, true), ACCEL_OK);
  EXPECT_FALSE(kernel_capture_running());  // not asked yet
  ASSERT_EQ(trace->set_detail(&other_host, ACCEL_TRACE_DETAIL_KERNELS), ACCEL_OK);
  EXPECT_TRUE(kernel_capture_running());
  (void)at::mm(at::ones({8, 8}), at::ones({8, 8}));
  ASSERT_EQ(trace->set_capture(&other_host, false), ACCEL_OK);
  EXPECT_FALSE(kernel_capture_running());  // drained when capture turned off
  for (const Delivered& k : kernels) {  // none without a GPU; on one, device tracks
    EXPECT_TRUE(k.has_stream);
    EXPECT_EQ(k.detail.rfind("device=", 0), 0u) << k.detail;
  }
  ASSERT_EQ(trace->set_detail(&other_host, 0), ACCEL_OK);
  context.identity.device = DLDevice{kDLCPU, 0};
}

}  // namespace
}  // namespace accel::runtime::testing
