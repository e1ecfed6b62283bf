// The trace and metrics area of the services table (accel/trace.h), and the
// host's own event emission (emit_trace_event, used by the memory services).
//
// Events are built as AccelTraceEvent on the emitting thread, stamped with
// CLOCK_MONOTONIC, and handed to HostContext::trace_listener (the registry,
// which forwards them to the capturing plugins' trace_event hooks) only while
// at least one plugin captures; otherwise an emit is one locked check. Device
// ranges (a stream given) are delivered at once: on CPU ranks work is
// synchronous, so the host time is the device time.
//
// Metrics are combined per step in HostContext::step_metrics under
// "PLUGIN.name" with the first record's reduce, and also delivered as COUNTER
// events (category "metric").
//
// set_detail (ABI 1.2) records which operator detail each plugin wants; the
// LibTorch operator callback itself lives in trace_operators.cpp.
//
// Thread-safety: every function may be called from any thread. The capture
// set, step_metrics and metric_records are guarded by HostContext::mutex; the
// listener is called outside the lock (trace_event hooks may run
// concurrently, accel/plugin.h) and must not be replaced while plugins run.
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
  try {
    if (!context.trace_listener) return false;
    std::lock_guard<std::mutex> lock(context.mutex);
    for (const auto& [plugin, on] : context.capturing) {
      if (on) return true;
    }
  } catch (...) {
  }
  return false;
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
    event.timestamp_ns = monotonic_ns();
    event.step = context.step.load(std::memory_order_relaxed);
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

AccelStatus set_capture(AccelHost* host, bool capture) {
  return call_service("set_capture", [&] {
    HostContext& context = context_of(host);
    {
      std::lock_guard<std::mutex> lock(context.mutex);
      context.capturing[host->plugin_name] = capture;
    }
    update_operator_capture(context);
  });
}

AccelStatus set_detail(AccelHost* host, uint32_t detail) {
  return call_service("set_detail", [&] {
    HostContext& context = context_of(host);
    {
      std::lock_guard<std::mutex> lock(context.mutex);
      context.trace_detail[host->plugin_name] = detail;
    }
    update_operator_capture(context);
  });
}

}  // namespace

const AccelTraceServices* trace_services_table() {
  static const AccelTraceServices table{sizeof(AccelTraceServices), nullptr, &enabled, &begin, &end,
                                        &instant, &counter, &metric, &set_capture, &set_detail};
  return &table;
}

}  // namespace accel::runtime
