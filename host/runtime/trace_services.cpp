// The trace and metrics area of the services table (accel/trace.h), and the
// host's own event emission (emit_trace_event, used by the memory services).
//
// Events are built as AccelTraceEvent on the emitting thread, stamped with
// CLOCK_MONOTONIC, and handed to HostContext::trace_listener (the registry,
// which forwards them to the capturing plugins' trace_event hooks) only while
// at least one plugin captures; otherwise an emit is one atomic load. Device
// ranges (a stream given) are delivered at once: on CPU ranks work is
// synchronous, so the host time is the device time.
//
// Metrics are combined per step in HostContext::step_metrics under
// "PLUGIN.name" with the first record's reduce, and also delivered as COUNTER
// events (category "metric").
//
// set_detail (ABI 1.2) records which operator detail each plugin wants; the
// LibTorch operator callback lives in trace_operators.cpp, the device kernel
// session (Kineto) in trace_kernels.cpp.
//
// Thread-safety: every function may be called from any thread. The capture
// switches are HostContext::trace_capture's (trace_capture.h: an emit's check
// is one atomic load; turning a plugin's capture off waits for deliveries to
// it in progress); step_metrics, metric_records and trace_detail are guarded
// by HostContext::mutex. The listener is called outside any lock
// (trace_event hooks may run concurrently, accel/plugin.h) and must not be
// replaced while plugins run.
#include <accel/accel.h>

#include <time.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "host/runtime/host_context.h"
#include "host/runtime/service_support.h"

namespace accel::runtime {

int64_t monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

namespace {

// Host numbering of threads for AccelTraceEvent.thread_id: 1, 2, ... in the
// order threads first emit.
uint64_t this_thread_number() {
  static std::atomic<uint64_t> next{1};
  thread_local const uint64_t number = next.fetch_add(1);
  return number;
}

}  // namespace

bool trace_capturing(HostContext& context) noexcept {
  return context.trace_listener && context.trace_capture.any();
}

void emit_trace_event(HostContext& context, const TraceEventFields& fields) noexcept {
  try {
    if (!trace_capturing(context)) return;
    AccelTraceEvent event{};
    event.struct_size = sizeof(AccelTraceEvent);
    event.type = fields.type;
    event.rank = context.identity.rank;
    event.name = fields.name == nullptr ? "" : fields.name;
    event.category = fields.category == nullptr ? fields.source : fields.category;
    event.source = fields.source;
    const bool now = fields.timestamp_ns < 0;
    event.timestamp_ns = now ? monotonic_ns() : fields.timestamp_ns;
    event.step = fields.step != TraceEventFields::kCurrentStep ? fields.step
                                                              : context.step.load(std::memory_order_relaxed);
    if (now) note_kernel_step(event.timestamp_ns, event.step);
    event.unit = fields.unit;
    event.micro_batch = fields.micro_batch;
    event.value = fields.type == ACCEL_TRACE_COUNTER ? fields.value : 0.0;
    event.thread_id = this_thread_number();
    event.stream = fields.stream;
    event.bytes = fields.bytes;
    event.detail = fields.detail;
    context.trace_listener(event);
  } catch (...) {
    // Emitting never fails (accel/trace.h).
  }
}

namespace {

// A plugin's emit: its name is the source, and the default category.
void emit_from_plugin(AccelHost* host, AccelTraceEventType type, const char* name, const char* category,
                      AccelStream stream, double value) {
  if (host == nullptr || host->context == nullptr) return;
  TraceEventFields fields;
  fields.type = type;
  fields.name = name;
  fields.source = host->plugin_name.c_str();
  fields.category = category == nullptr ? fields.source : category;
  fields.stream = stream;
  fields.value = value;
  emit_trace_event(*host->context, fields);
}

bool enabled(AccelHost* host, const char* /*category*/) {
  // Capture is all-or-nothing in this host version: a capturing plugin
  // receives every category.
  return host != nullptr && host->context != nullptr && trace_capturing(*host->context);
}

void begin(AccelHost* host, const char* name, const char* category, AccelStream stream) {
  emit_from_plugin(host, ACCEL_TRACE_BEGIN, name, category, stream, 0.0);
}

void end(AccelHost* host, const char* name, const char* category, AccelStream stream) {
  emit_from_plugin(host, ACCEL_TRACE_END, name, category, stream, 0.0);
}

void instant(AccelHost* host, const char* name, const char* category) {
  emit_from_plugin(host, ACCEL_TRACE_INSTANT, name, category, nullptr, 0.0);
}

void counter(AccelHost* host, const char* name, const char* category, double value) {
  emit_from_plugin(host, ACCEL_TRACE_COUNTER, name, category, nullptr, value);
}

void metric(AccelHost* host, const char* name, double value, AccelMetricReduce reduce) {
  if (host == nullptr || host->context == nullptr || name == nullptr) return;
  try {
    HostContext& context = *host->context;
    const std::string key = host->plugin_name + "." + name;
    {
      std::lock_guard<std::mutex> lock(context.mutex);
      MetricRecord& record = context.metric_records[key];
      auto it = context.step_metrics.find(key);
      if (it == context.step_metrics.end()) {
        // First record of this step (the trainer drained the last one).
        const bool known = reduce >= ACCEL_METRIC_LAST && reduce <= ACCEL_METRIC_MIN;
        record = MetricRecord{known ? reduce : ACCEL_METRIC_LAST, value, 1};
        context.step_metrics.emplace(key, value);
      } else {
        double& current = it->second;
        record.sum += value;
        record.count += 1;
        switch (record.reduce) {
          case ACCEL_METRIC_SUM: current = record.sum; break;
          case ACCEL_METRIC_MEAN: current = record.sum / static_cast<double>(record.count); break;
          case ACCEL_METRIC_MAX: current = std::max(current, value); break;
          case ACCEL_METRIC_MIN: current = std::min(current, value); break;
          default: current = value; break;  // LAST
        }
      }
    }
    TraceEventFields fields;
    fields.type = ACCEL_TRACE_COUNTER;
    fields.name = name;
    fields.category = "metric";
    fields.source = host->plugin_name.c_str();
    fields.value = value;
    emit_trace_event(context, fields);
  } catch (...) {
    // Recording never fails.
  }
}

// set_capture and set_detail alike: what the device recorded so far is
// delivered first (while the plugin still captures, so it gets its own
// kernels), then the calling plugin's setting changes, then the operator
// callback and the kernel session follow what every plugin now wants.
template <typename Change>
AccelStatus change_trace_setting(AccelHost* host, const char* service, Change&& change) {
  return call_service(service, [&] {
    HostContext& context = context_of(host);
    drain_kernel_capture(context);
    change(context, host->plugin_name);
    update_operator_capture(context);
  });
}

AccelStatus set_capture(AccelHost* host, bool capture) {
  return change_trace_setting(host, "set_capture", [capture](HostContext& context, const std::string& plugin) {
    context.trace_capture.set(plugin, capture);  // off: waits for deliveries in progress
  });
}

AccelStatus set_detail(AccelHost* host, uint32_t detail) {
  return change_trace_setting(host, "set_detail", [detail](HostContext& context, const std::string& plugin) {
    std::lock_guard<std::mutex> lock(context.mutex);
    context.trace_detail[plugin] = detail;
  });
}

}  // namespace

void end_trace_capture(HostContext& context, const std::string& plugin) noexcept {
  try {
    drain_kernel_capture(context);
    context.trace_capture.set(plugin, false);
    {
      std::lock_guard<std::mutex> lock(context.mutex);
      context.trace_detail.erase(plugin);
    }
    update_operator_capture(context);
  } catch (...) {
    // Teardown goes on; what is left installed is removed with the context.
  }
}

const AccelTraceServices* trace_services_table() {
  static const AccelTraceServices table{sizeof(AccelTraceServices), nullptr, &enabled, &begin, &end,
                                        &instant, &counter, &metric, &set_capture, &set_detail};
  return &table;
}

}  // namespace accel::runtime
