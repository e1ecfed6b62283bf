// Operator detail for the trace services (accel/trace.h, set_detail): while a
// capturing plugin asked for ACCEL_TRACE_DETAIL_OPERATORS, a global LibTorch
// RecordFunction callback (the hook torch.profiler itself uses) turns every
// operator the host runs into a BEGIN/END pair of category "operator", with
// input shapes and dtypes in the detail when ACCEL_TRACE_DETAIL_SHAPES is
// asked. The callback is installed only while wanted and removed otherwise,
// so a run that never asks pays nothing.
//
// Invariant: at most one callback is installed (one HostContext per process
// captures operators); update_operator_capture recomputes what is wanted
// from every plugin's capture and detail settings after each change, for
// the device kernel session (trace_kernels.cpp) too.
//
// Thread-safety: the callbacks run on any thread that runs an operator
// (autograd's, intra-op workers); they read the installed state through
// atomics and emit through emit_trace_event (thread-safe). Installing and
// removing happens on the loop thread under a mutex.
#include <ATen/record_function.h>

#include <atomic>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "host/runtime/host_context.h"
#include "host/runtime/service_support.h"

namespace accel::runtime {
namespace {

std::atomic<HostContext*> g_context{nullptr};
std::atomic<bool> g_shapes{false};
std::mutex g_install_mutex;
at::CallbackHandle g_handle = at::INVALID_CALLBACK_HANDLE;

// "[4, 64, 128], [384, 128]" and "float, float": what record_shapes shows.
std::string describe_inputs(const at::RecordFunction& fn) {
  std::ostringstream shapes, dtypes;
  bool first = true;
  for (const c10::IValue& input : fn.inputs()) {
    if (!first) {
      shapes << ", ";
      dtypes << ", ";
    }
    first = false;
    if (input.isTensor() && input.toTensor().defined()) {
      const at::Tensor& t = input.toTensor();
      shapes << '[';
      for (int64_t d = 0; d < t.dim(); ++d) shapes << (d ? ", " : "") << t.size(d);
      shapes << ']';
      dtypes << c10::toString(t.scalar_type());
    } else if (input.isScalar()) {
      shapes << "[]";
      dtypes << "Scalar";
    } else {
      shapes << "[]";
      dtypes << "";
    }
  }
  return "shapes=" + shapes.str() + "; dtypes=" + dtypes.str();
}

void emit_operator(const at::RecordFunction& fn, AccelTraceEventType type) {
  HostContext* context = g_context.load(std::memory_order_acquire);
  if (context == nullptr) return;
  TraceEventFields fields;
  fields.type = type;
  fields.name = fn.name();
  fields.category = "operator";
  fields.source = "host";
  std::string detail;
  if (type == ACCEL_TRACE_BEGIN && g_shapes.load(std::memory_order_relaxed)) {
    try {
      detail = describe_inputs(fn);
    } catch (...) {
      detail.clear();  // an input that cannot be described is left out
    }
    fields.detail = detail.c_str();
  }
  emit_trace_event(*context, fields);
}

std::unique_ptr<at::ObserverContext> on_operator_start(const at::RecordFunction& fn) {
  emit_operator(fn, ACCEL_TRACE_BEGIN);
  return nullptr;
}

void on_operator_end(const at::RecordFunction& fn, at::ObserverContext*) { emit_operator(fn, ACCEL_TRACE_END); }

}  // namespace

void update_operator_capture(HostContext& context) {
  std::vector<std::string> capturing;
  context.trace_capture.for_each_capturing([&](const std::string& plugin) { capturing.push_back(plugin); });
  uint32_t wanted = 0;
  {
    std::lock_guard<std::mutex> lock(context.mutex);
    for (const std::string& plugin : capturing) {
      const auto it = context.trace_detail.find(plugin);
      if (it != context.trace_detail.end()) wanted |= it->second;
    }
  }
  update_kernel_capture(context, (wanted & ACCEL_TRACE_DETAIL_KERNELS) != 0);
  std::lock_guard<std::mutex> lock(g_install_mutex);
  const bool operators = (wanted & ACCEL_TRACE_DETAIL_OPERATORS) != 0;
  g_shapes.store((wanted & ACCEL_TRACE_DETAIL_SHAPES) != 0, std::memory_order_relaxed);
  if (operators && g_handle == at::INVALID_CALLBACK_HANDLE) {
    g_context.store(&context, std::memory_order_release);
    g_handle = at::addGlobalCallback(at::RecordFunctionCallback(&on_operator_start, &on_operator_end)
                                         .needsInputs(true)
                                         .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  } else if (!operators && g_handle != at::INVALID_CALLBACK_HANDLE) {
    at::removeCallback(g_handle);
    g_handle = at::INVALID_CALLBACK_HANDLE;
    g_context.store(nullptr, std::memory_order_release);
  }
}

void stop_operator_capture(HostContext& context) {
  update_kernel_capture(context, false);
  std::lock_guard<std::mutex> lock(g_install_mutex);
  if (g_context.load() != &context || g_handle == at::INVALID_CALLBACK_HANDLE) return;
  at::removeCallback(g_handle);
  g_handle = at::INVALID_CALLBACK_HANDLE;
  g_context.store(nullptr, std::memory_order_release);
}

}  // namespace accel::runtime
