// The services table every plugin receives (accel/services.h): its core —
// errors, logging, identity — and the assembly of the area tables that the
// other *_services.cpp files define. Also HostContext's lifetime.
//
// Errors follow accel/status.h. Each thread has one pending error (what the
// registry reports when a hook fails) and one last-service-failure message
// (what last_error returns). A failing service replaces both; set_error
// prepends its context to the pending one; a successful service call leaves
// both alone, so a plugin may free buffers between a failure and its return
// without losing the message. take_pending_error clears both: the registry
// calls it before each hook.
//
// Thread-safety: every function here may be called from any thread; the
// error state is thread-local, logging is the thread-safe accel::log.
#include <accel/accel.h>

#include <c10/util/Exception.h>

#include <new>
#include <string>

#include "host/comm/process_group.h"  // HostContext owns the context sub-groups
#include "host/runtime/host_context.h"
#include "host/runtime/memory_services.h"
#include "host/runtime/model_services.h"
#include "host/runtime/service_support.h"
#include "host/util/log.h"
#include "host/util/strformat.h"

namespace accel::runtime {

HostContext::HostContext() : memory(std::make_unique<MemoryAccounting>()) {
  identity.struct_size = sizeof(AccelIdentity);
  identity.extensions = nullptr;
  identity.rank = 0;
  identity.world_size = 1;
  identity.local_rank = 0;
  identity.local_world_size = 1;
  identity.node_rank = 0;
  identity.num_nodes = 1;
  identity.device = DLDevice{kDLCPU, 0};
}

HostContext::~HostContext() { stop_operator_capture(*this); }

// ---------------------------------------------------------------------------
// Thread-local error state
// ---------------------------------------------------------------------------
namespace {

struct ThreadErrors {
  PendingError pending;
  std::string last_service_failure;  // c_str() handed out by last_error
};

ThreadErrors& thread_errors() {
  thread_local ThreadErrors errors;
  return errors;
}

}  // namespace

PendingError take_pending_error() {
  ThreadErrors& errors = thread_errors();
  PendingError taken = std::move(errors.pending);
  errors.pending = PendingError{};
  errors.last_service_failure.clear();
  return taken;
}

void set_pending_error(AccelStatus status, std::string message) {
  ThreadErrors& errors = thread_errors();
  errors.last_service_failure = message;
  errors.pending.status = status;
  errors.pending.message = std::move(message);
}

void record_service_failure(AccelStatus status, const char* service, const std::string& message) {
  set_pending_error(status, std::string(service) + ": " + message);
}

AccelStatus record_current_exception(const char* service) noexcept {
  AccelStatus status = ACCEL_ERROR_INTERNAL;
  try {
    try {
      throw;
    } catch (const ServiceError& e) {
      status = e.status();
      record_service_failure(status, service, e.what());
    } catch (const c10::OutOfMemoryError& e) {
      status = ACCEL_ERROR_OUT_OF_MEMORY;
      record_service_failure(status, service, e.what_without_backtrace());
    } catch (const c10::Error& e) {
      // ATen rejected the arguments (shapes, dtypes) or failed inside.
      status = ACCEL_ERROR_INVALID_ARGUMENT;
      std::string what = e.what_without_backtrace();
      if (const size_t newline = what.find('\n'); newline != std::string::npos) what.resize(newline);
      record_service_failure(status, service, what);
    } catch (const std::bad_alloc&) {
      status = ACCEL_ERROR_OUT_OF_MEMORY;
      record_service_failure(status, service, "out of host memory");
    } catch (const std::exception& e) {
      record_service_failure(status, service, std::string("internal error: ") + e.what());
    } catch (...) {
      record_service_failure(status, service, "internal error: unknown exception");
    }
  } catch (...) {
    // Recording itself ran out of memory: the status still travels.
  }
  return status;
}

HostContext& context_of(AccelHost* host) {
  if (host == nullptr) fail(ACCEL_ERROR_INVALID_ARGUMENT, "the AccelHost handle is NULL");
  if (host->context == nullptr) {
    fail(ACCEL_ERROR_FAILED_PRECONDITION,
         "not available in an info-only load (--list-plugins, --help, checks)");
  }
  return *host->context;
}

const std::string& plugin_name_of(const AccelHost* host) {
  static const std::string empty;
  return host == nullptr ? empty : host->plugin_name;
}

void require_args(const void* args, size_t struct_size, size_t min_size, const char* what) {
  if (args == nullptr) fail(ACCEL_ERROR_INVALID_ARGUMENT, std::string(what) + " is NULL");
  if (struct_size < min_size) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT,
         strformat("%s.struct_size is %zu, smaller than its ABI 1.0 size %zu (struct_size unset?)",
                   what, struct_size, min_size));
  }
}

// ---------------------------------------------------------------------------
// Core services
// ---------------------------------------------------------------------------
namespace {

void core_set_error(AccelHost* /*host*/, AccelStatus status, const char* message) {
  if (status == ACCEL_OK) return;
  try {
    ThreadErrors& errors = thread_errors();
    std::string text = message == nullptr ? std::string() : std::string(message);
    if (!errors.pending.message.empty()) {
      // Context on top of a failure already pending (accel/status.h).
      text = text.empty() ? errors.pending.message : text + ": " + errors.pending.message;
    }
    errors.pending.status = status;
    errors.pending.message = std::move(text);
  } catch (...) {
    thread_errors().pending.status = status;
  }
}

const char* core_last_error(AccelHost* /*host*/) {
  return thread_errors().last_service_failure.c_str();
}

log::Level to_log_level(AccelLogLevel level) {
  switch (level) {
    case ACCEL_LOG_TRACE: return log::Level::trace;
    case ACCEL_LOG_DEBUG: return log::Level::debug;
    case ACCEL_LOG_INFO: return log::Level::info;
    case ACCEL_LOG_WARN: return log::Level::warn;
    case ACCEL_LOG_ERROR: return log::Level::error;
    default: return level > ACCEL_LOG_ERROR ? log::Level::error : log::Level::info;
  }
}

void core_log(AccelHost* host, AccelLogLevel level, const char* message) {
  try {
    const log::Level host_level = to_log_level(level);
    if (!log::enabled(host_level)) return;
    std::string line = "[plugin " + plugin_name_of(host) + "] ";
    if (message != nullptr) line += message;
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    log::write(host_level, line);
  } catch (...) {
    // Logging never fails (accel/services.h).
  }
}

bool core_log_enabled(AccelHost* /*host*/, AccelLogLevel level) {
  try {
    return log::enabled(to_log_level(level));
  } catch (...) {
    return false;
  }
}

AccelStatus core_get_identity(AccelHost* host, const AccelIdentity** identity) {
  return call_service("get_identity", [&] {
    if (identity == nullptr) fail(ACCEL_ERROR_INVALID_ARGUMENT, "identity is NULL");
    if (host != nullptr && host->context == nullptr) {
      // Info-only loads: rank 0 of 1 on the CPU (accel/services.h).
      static const AccelIdentity info_only{sizeof(AccelIdentity), nullptr, 0, 1, 0, 1, 0, 1,
                                           DLDevice{kDLCPU, 0}};
      *identity = &info_only;
      return;
    }
    *identity = &context_of(host).identity;
  });
}

}  // namespace

const AccelHostServices* host_services() {
  static const AccelHostServices table = [] {
    AccelHostServices t{};
    t.struct_size = sizeof(AccelHostServices);
    t.extensions = nullptr;
    t.set_error = &core_set_error;
    t.last_error = &core_last_error;
    t.log = &core_log;
    t.log_enabled = &core_log_enabled;
    t.get_identity = &core_get_identity;
    t.options = option_services_table();
    t.comm = comm_services_table();
    t.memory = memory_services_table();
    t.kernels = kernel_services_table();
    t.model = model_services_table();
    t.trace = trace_services_table();
    t.checkpoint = checkpoint_services_table();
    t.gather_codec = gather_codec_services_table();
    t.precision = precision_services_table();
    return t;
  }();
  return &table;
}

}  // namespace accel::runtime
