// What the trace services cost per event, without the noise of a whole
// training run (issue 12's "loaded but outside the active steps, at most 1 %
// of step time"): a step of N host ranges pays N times the inactive range
// below, whatever else the machine does. Google Benchmark; results and the
// command in docs/benchmarks.md ("Profiler overhead").
//
//   inactive_host_range   a TraceRange (the host's step/unit/hook ranges)
//                         while a trace listener is installed (the profiler
//                         loaded) but no plugin captures: one atomic load
//   inactive_plugin_range trace->begin + trace->end from a plugin, likewise
//   active_host_range     a TraceRange while one plugin captures: BEGIN and
//                         END built, stamped and delivered through the
//                         capture gate to a trace_event that does nothing
#include <benchmark/benchmark.h>

#include <string>

#include "host/runtime/host_context.h"
#include "host/runtime/service_support.h"
#include "host/runtime/trace_scope.h"

namespace {

using accel::runtime::HostContext;
using accel::runtime::TraceRange;

// A context with a listener installed the way the registry installs it:
// every event goes through the capture gate to plugin "profiler".
struct Traced {
  HostContext context;
  AccelHost host;
  int64_t delivered = 0;
  Traced() {
    host.context = &context;
    host.plugin_name = "profiler";
    context.trace_listener = [this](const AccelTraceEvent& event) {
      context.trace_capture.deliver("profiler", [&] {
        benchmark::DoNotOptimize(event.timestamp_ns);
        ++delivered;
      });
    };
  }
};

void inactive_host_range(benchmark::State& state) {
  Traced t;
  for (auto _ : state) {
    const TraceRange range(&t.context, "forward", "host", 1, 0);
    benchmark::DoNotOptimize(range.recording());
  }
  if (t.delivered != 0) state.SkipWithError("delivered while nobody captured");
}
BENCHMARK(inactive_host_range);

void inactive_plugin_range(benchmark::State& state) {
  Traced t;
  const AccelTraceServices* trace = accel::runtime::host_services()->trace;
  for (auto _ : state) {
    trace->begin(&t.host, "bucket", nullptr, nullptr);
    trace->end(&t.host, "bucket", nullptr, nullptr);
  }
  if (t.delivered != 0) state.SkipWithError("delivered while nobody captured");
}
BENCHMARK(inactive_plugin_range);

void active_host_range(benchmark::State& state) {
  Traced t;
  t.context.trace_capture.set("profiler", true);
  for (auto _ : state) {
    const TraceRange range(&t.context, "forward", "host", 1, 0);
    benchmark::DoNotOptimize(range.recording());
  }
  t.context.trace_capture.set("profiler", false);
  state.counters["events"] = static_cast<double>(t.delivered);
}
BENCHMARK(active_host_range);

}  // namespace

BENCHMARK_MAIN();
