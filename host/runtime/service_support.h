// What every area of the services table shares: the exception that carries a
// status and a message out of a service body, the one boundary wrapper that
// turns it (or any other exception) into an AccelStatus plus the thread's
// pending error, the lookup of the calling plugin's context, and the
// accessors of each area's static table.
//
// Invariant: no exception ever leaves a function in a services table. Every
// status-returning service is `return call_service(host, "name", [&] {...});`
// and every void one (log, trace) catches everything itself.
//
// Thread-safety: call_service is reentrant; the error it records is
// thread-local (services.cpp).
#pragma once

#include <accel/accel.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "host/runtime/host_context.h"

namespace accel::runtime {

// Thrown inside a service body; call_service records "SERVICE: message".
class ServiceError : public std::runtime_error {
 public:
  ServiceError(AccelStatus status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  AccelStatus status() const { return status_; }

 private:
  AccelStatus status_;
};

[[noreturn]] inline void fail(AccelStatus status, const std::string& message) {
  throw ServiceError(status, message);
}

// Records the failure of service `service` on this thread: it becomes both
// what last_error() returns and the pending error a propagating plugin
// returns with (services.cpp).
void record_service_failure(AccelStatus status, const char* service, const std::string& message);

// Maps the exception being handled (call only inside a catch block) to a
// status and records it for `service`. c10 errors lose their backtrace;
// allocation failures become ACCEL_ERROR_OUT_OF_MEMORY.
AccelStatus record_current_exception(const char* service) noexcept;

// Runs `body` and returns ACCEL_OK, or the recorded failure.
template <class Body>
AccelStatus call_service(const char* service, Body&& body) noexcept {
  try {
    std::forward<Body>(body)();
    return ACCEL_OK;
  } catch (...) {
    return record_current_exception(service);
  }
}

// The calling plugin's context; throws FAILED_PRECONDITION for a NULL handle
// or an info-only handle without one.
HostContext& context_of(AccelHost* host);
// The calling plugin's name ("" for a NULL handle).
const std::string& plugin_name_of(const AccelHost* host);

// Checks a plugin-filled args struct: not NULL, and at least as large as the
// struct was in ABI 1.0 (`min_size`, an ACCEL_FIELD_END of its last 1.0
// field): a smaller one is a plugin bug, never a legal older layout.
void require_args(const void* args, size_t struct_size, size_t min_size, const char* what);
#define ACCEL_REQUIRE_ARGS(args, type, last_field) \
  ::accel::runtime::require_args((args), (args) == nullptr ? 0 : (args)->struct_size, \
                                 ACCEL_FIELD_END(type, last_field), #type)

// CLOCK_MONOTONIC in nanoseconds: the clock of every AccelTraceEvent.
int64_t monotonic_ns();

// Delivers one event to the capturing plugins (trace_services.cpp) when at
// least one captures; costs one atomic load otherwise. `source` is "host" or
// a plugin's name. Never throws.
struct TraceEventFields {
  AccelTraceEventType type = ACCEL_TRACE_INSTANT;
  const char* name = "";
  const char* category = "host";
  const char* source = "host";
  double value = 0.0;
  int64_t bytes = 0;
  AccelStream stream = nullptr;
  const char* detail = nullptr;
  int32_t unit = -1;         // the unit concerned, -1 if none
  int32_t micro_batch = -1;  // the micro-batch, -1 if none
  // Events recorded earlier and delivered now (device kernels): their own
  // time and step. -1 / kCurrentStep: now, and the step running now.
  int64_t timestamp_ns = -1;
  int64_t step = kCurrentStep;
  static constexpr int64_t kCurrentStep = INT64_MIN;
};
void emit_trace_event(HostContext& context, const TraceEventFields& fields) noexcept;
bool trace_capturing(HostContext& context) noexcept;
// Installs or removes the LibTorch operator callback after a plugin changed
// its capture or detail (trace_operators.cpp); stop_operator_capture removes
// it for good (the context is going away). Loop thread.
void update_operator_capture(HostContext& context);
void stop_operator_capture(HostContext& context);
// The device kernel session (trace_kernels.cpp, ACCEL_TRACE_DETAIL_KERNELS
// on a CUDA rank): update_operator_capture starts or stops it; drain stops
// it and delivers what it recorded, before a capture or detail change.
void update_kernel_capture(HostContext& context, bool wanted);
void drain_kernel_capture(HostContext& context) noexcept;
// Called by every emit: while a kernel session records, remembers when the
// step changed, so kernels delivered later carry the step they ran in.
void note_kernel_step(int64_t ts_ns, int64_t step) noexcept;
// Turns a plugin's capture and detail off for good, waiting for deliveries
// to it in progress (the registry, before the plugin's teardown).
void end_trace_capture(HostContext& context, const std::string& plugin) noexcept;

// The static area tables (one per *_services.cpp), assembled by services.cpp.
const AccelOptionServices* option_services_table();
const AccelCommServices* comm_services_table();
const AccelMemoryServices* memory_services_table();
const AccelKernelServices* kernel_services_table();
const AccelModelServices* model_services_table();
const AccelTraceServices* trace_services_table();
const AccelCheckpointServices* checkpoint_services_table();
const AccelGatherCodecServices* gather_codec_services_table();
const AccelPrecisionServices* precision_services_table();

}  // namespace accel::runtime
