// The trace area: events reach the listener only while a plugin captures,
// carry type, names, source, step and a monotonic timestamp; metrics combine
// per step with the first record's reduce, from any thread; LibTorch
// operators become events only while a capturing plugin asks (set_detail);
// the host's TraceRange opens and closes a range around its scope.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "host/runtime/trace_scope.h"
#include "tests/runtime/services_test_support.h"

namespace accel::runtime::testing {
namespace {

struct Seen {
  AccelTraceEventType type;
  std::string name, category, source;
  int64_t timestamp_ns, step;
  double value;
  uint64_t thread_id;
  std::string detail;
  int32_t unit;
};

class TraceServicesTest : public ServicesTest {
 protected:
  TraceServicesTest() {
    context.trace_listener = [this](const AccelTraceEvent& e) {
      std::lock_guard<std::mutex> lock(seen_mutex);
      seen.push_back({e.type, e.name, e.category, e.source, e.timestamp_ns, e.step, e.value, e.thread_id,
                      e.detail ? e.detail : "", e.unit});
    };
  }
  const AccelTraceServices* trace() { return services->trace; }

  std::mutex seen_mutex;
  std::vector<Seen> seen;
};

TEST_F(TraceServicesTest, NothingIsDeliveredUntilAPluginCaptures) {
  EXPECT_FALSE(trace()->enabled(&host, "host"));
  trace()->instant(&host, "ignored", nullptr);
  EXPECT_TRUE(seen.empty());

  ASSERT_EQ(trace()->set_capture(&other_host, true), ACCEL_OK);
  EXPECT_TRUE(trace()->enabled(&host, "host"));
  context.step = 12;
  trace()->begin(&host, "shard", nullptr, nullptr);
  trace()->counter(&host, "bytes_in_flight", "comm", 4096.0);
  trace()->end(&host, "shard", nullptr, nullptr);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].type, ACCEL_TRACE_BEGIN);
  EXPECT_EQ(seen[0].name, "shard");
  EXPECT_EQ(seen[0].category, "tester");  // defaults to the plugin's name
  EXPECT_EQ(seen[0].source, "tester");
  EXPECT_EQ(seen[0].step, 12);
  EXPECT_EQ(seen[1].type, ACCEL_TRACE_COUNTER);
  EXPECT_EQ(seen[1].category, "comm");
  EXPECT_EQ(seen[1].value, 4096.0);
  EXPECT_EQ(seen[2].type, ACCEL_TRACE_END);
  EXPECT_LE(seen[0].timestamp_ns, seen[2].timestamp_ns);
  EXPECT_GT(seen[0].timestamp_ns, 0);

  ASSERT_EQ(trace()->set_capture(&other_host, false), ACCEL_OK);
  trace()->instant(&host, "after", nullptr);
  EXPECT_EQ(seen.size(), 3u);
}

TEST_F(TraceServicesTest, HostAllocationsAreMemoryEvents) {
  ASSERT_EQ(trace()->set_capture(&other_host, true), ACCEL_OK);
  const int64_t shape[] = {8};
  AccelAllocateArgs args{};
  args.struct_size = sizeof(args);
  args.category = ACCEL_MEMORY_WORKSPACE;
  args.dtype = accel_dtype(kDLFloat, 32);
  args.ndim = 1;
  args.shape = shape;
  ASSERT_EQ(services->memory->allocate(&host, &args), ACCEL_OK);
  ASSERT_EQ(services->memory->deallocate(&host, args.buffer, nullptr), ACCEL_OK);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].name, "allocate");
  EXPECT_EQ(seen[0].category, "memory");
  EXPECT_EQ(seen[1].name, "deallocate");
}

TEST_F(TraceServicesTest, MetricsCombineWithTheFirstReduce) {
  trace()->metric(&host, "bucket_count", 2.0, ACCEL_METRIC_SUM);
  trace()->metric(&host, "bucket_count", 3.0, ACCEL_METRIC_MAX);  // SUM wins
  trace()->metric(&host, "latency", 1.0, ACCEL_METRIC_MEAN);
  trace()->metric(&host, "latency", 4.0, ACCEL_METRIC_MEAN);
  trace()->metric(&host, "peak", 5.0, ACCEL_METRIC_MAX);
  trace()->metric(&host, "peak", 3.0, ACCEL_METRIC_MAX);
  trace()->metric(&other_host, "peak", 1.0, ACCEL_METRIC_MIN);
  trace()->metric(&other_host, "peak", 0.5, ACCEL_METRIC_MIN);
  trace()->metric(&host, "last", 1.0, ACCEL_METRIC_LAST);
  trace()->metric(&host, "last", 9.0, ACCEL_METRIC_LAST);
  EXPECT_EQ(context.step_metrics["tester.bucket_count"], 5.0);
  EXPECT_EQ(context.step_metrics["tester.latency"], 2.5);
  EXPECT_EQ(context.step_metrics["tester.peak"], 5.0);
  EXPECT_EQ(context.step_metrics["other.peak"], 0.5);
  EXPECT_EQ(context.step_metrics["tester.last"], 9.0);

  // The trainer drains the step; the next step starts afresh.
  context.step_metrics.clear();
  trace()->metric(&host, "latency", 7.0, ACCEL_METRIC_MEAN);
  EXPECT_EQ(context.step_metrics["tester.latency"], 7.0);
}

TEST_F(TraceServicesTest, MetricsAreDeliveredAsCountersFromAnyThread) {
  ASSERT_EQ(trace()->set_capture(&other_host, true), ACCEL_OK);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([this] {
      for (int i = 0; i < 250; ++i) trace()->metric(&host, "count", 1.0, ACCEL_METRIC_SUM);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(context.step_metrics["tester.count"], 1000.0);
  ASSERT_EQ(seen.size(), 1000u);
  EXPECT_EQ(seen[0].type, ACCEL_TRACE_COUNTER);
  EXPECT_EQ(seen[0].category, "metric");
  EXPECT_EQ(seen[0].name, "count");
}

TEST_F(TraceServicesTest, EmittingNeverFailsOnOddInput) {
  ASSERT_EQ(trace()->set_capture(&other_host, true), ACCEL_OK);
  trace()->instant(&host, nullptr, nullptr);
  trace()->metric(&host, nullptr, 1.0, ACCEL_METRIC_SUM);
  trace()->metric(&host, "odd_reduce", 1.0, static_cast<AccelMetricReduce>(77));
  trace()->instant(nullptr, "no host", nullptr);
  EXPECT_FALSE(trace()->enabled(nullptr, "host"));
  AccelHost info_only;
  EXPECT_EQ(trace()->set_capture(&info_only, true), ACCEL_ERROR_FAILED_PRECONDITION);
  EXPECT_EQ(seen.size(), 2u);  // the instant and odd_reduce's counter
}

TEST_F(TraceServicesTest, OperatorsAreEventsOnlyWhileAskedAndCapturing) {
  const at::Tensor a = at::ones({2, 3}), b = at::ones({3, 4});
  const auto operator_events = [&] {
    std::vector<Seen> ops;
    for (const Seen& e : seen) {
      if (e.category == "operator") ops.push_back(e);
    }
    return ops;
  };
  ASSERT_EQ(trace()->set_capture(&other_host, true), ACCEL_OK);
  (void)at::mm(a, b);
  EXPECT_TRUE(operator_events().empty());  // capture alone: the host's ranges only

  ASSERT_EQ(trace()->set_detail(&other_host, ACCEL_TRACE_DETAIL_OPERATORS | ACCEL_TRACE_DETAIL_SHAPES), ACCEL_OK);
  (void)at::mm(a, b);
  std::vector<Seen> ops = operator_events();
  ASSERT_GE(ops.size(), 2u);
  EXPECT_EQ(ops.front().type, ACCEL_TRACE_BEGIN);
  EXPECT_EQ(ops.front().name, "aten::mm");
  EXPECT_EQ(ops.front().source, "host");
  EXPECT_EQ(ops.front().detail, "shapes=[2, 3], [3, 4]; dtypes=Float, Float");
  EXPECT_EQ(ops.back().type, ACCEL_TRACE_END);
  EXPECT_EQ(ops.back().name, "aten::mm");

  seen.clear();
  ASSERT_EQ(trace()->set_detail(&other_host, ACCEL_TRACE_DETAIL_OPERATORS), ACCEL_OK);
  (void)at::mm(a, b);
  ops = operator_events();
  ASSERT_FALSE(ops.empty());
  EXPECT_EQ(ops.front().detail, "");  // no shapes unless asked

  seen.clear();
  ASSERT_EQ(trace()->set_capture(&other_host, false), ACCEL_OK);
  ASSERT_EQ(trace()->set_capture(&other_host, true), ACCEL_OK);
  ASSERT_EQ(trace()->set_capture(&other_host, false), ACCEL_OK);
  (void)at::mm(a, b);
  EXPECT_TRUE(seen.empty());  // capture off: the callback is gone
  ASSERT_EQ(trace()->set_detail(&other_host, 0), ACCEL_OK);
}

TEST_F(TraceServicesTest, HostRangesCloseWithTheirScope) {
  { const TraceRange ignored(&context, "forward", "host", 2, 1); }
  EXPECT_TRUE(seen.empty());  // nobody captures: nothing, not even the detail
  ASSERT_EQ(trace()->set_capture(&other_host, true), ACCEL_OK);
  bool detail_built = false;
  try {
    const TraceRange range(&context, "all_reduce", "comm", "host", [&] {
      detail_built = true;
      return std::string("seq=3; group_ranks=0,1");
    }, -1, -1, 64);
    throw std::runtime_error("unwinds");
  } catch (const std::runtime_error&) {
  }
  { const TraceRange unit(&context, "forward", "host", 2, 1); }
  EXPECT_TRUE(detail_built);
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0].type, ACCEL_TRACE_BEGIN);
  EXPECT_EQ(seen[1].type, ACCEL_TRACE_END);  // closed by the exception's unwinding
  EXPECT_EQ(seen[1].name, "all_reduce");
  EXPECT_EQ(seen[1].detail, "seq=3; group_ranks=0,1");
  EXPECT_EQ(seen[2].unit, 2);
  EXPECT_EQ(seen[3].category, "host");

  // Known only once the work started: carried by the END.
  {
    TraceRange range(&context, "all_gather", "comm", "host", [] { return std::string(); });
    ASSERT_TRUE(range.recording());
    range.set_end_detail("seq=4; group_ranks=0,1", 16);
  }
  ASSERT_EQ(seen.size(), 6u);
  EXPECT_EQ(seen[4].detail, "");
  EXPECT_EQ(seen[5].type, ACCEL_TRACE_END);
  EXPECT_EQ(seen[5].detail, "seq=4; group_ranks=0,1");
}

}  // namespace
}  // namespace accel::runtime::testing
