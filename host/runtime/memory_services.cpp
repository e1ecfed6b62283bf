// The memory area of the services table (accel/memory.h) and the ledger
// behind it (see memory_services.h for the invariants).
//
// What this host version does: allocate/deallocate/copy/stats/reset_peak on
// CPU, and on CUDA when the rank's device is CUDA; streams and events as
// synchronous tokens on CPU. On a CUDA rank only the compute stream (NULL)
// exists and only device-wide synchronisation is offered: creating streams
// and events there gives ACCEL_ERROR_UNSUPPORTED until the CUDA stream layer
// lands.
#include "host/runtime/memory_services.h"

#include <ATen/DeviceAccelerator.h>
#include <c10/util/Exception.h>

#include <new>
#include <string>
#include <vector>

#include "host/runtime/host_context.h"
#include "host/runtime/service_support.h"
#include "host/runtime/trace_scope.h"
#include "host/util/strformat.h"

namespace accel::runtime {

// ---------------------------------------------------------------------------
// Ledger
// ---------------------------------------------------------------------------

const char* category_name(AccelMemoryCategory category) {
  switch (category) {
    case ACCEL_MEMORY_ALL: return "all";
    case ACCEL_MEMORY_PARAMS: return "params";
    case ACCEL_MEMORY_GRADS: return "grads";
    case ACCEL_MEMORY_OPTIMIZER: return "optimizer";
    case ACCEL_MEMORY_ACTIVATIONS: return "activations";
    case ACCEL_MEMORY_COMM: return "comm";
    case ACCEL_MEMORY_WORKSPACE: return "workspace";
    case ACCEL_MEMORY_OTHER: return "other";
    default: return "unknown";
  }
}

const char* place_name(AccelMemoryPlace place) {
  switch (place) {
    case ACCEL_MEMORY_DEVICE: return "device";
    case ACCEL_MEMORY_HOST: return "host";
    case ACCEL_MEMORY_HOST_PINNED: return "pinned host";
    default: return "unknown";
  }
}

MemoryCounters& MemoryAccounting::slot(AccelMemoryPlace place, AccelMemoryCategory category) {
  return counters_.at(static_cast<size_t>(place)).at(static_cast<size_t>(category));
}

void MemoryAccounting::record_allocate(AccelMemoryPlace place, AccelMemoryCategory category,
                                       int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (MemoryCounters* c : {&slot(place, category), &slot(place, ACCEL_MEMORY_ALL)}) {
    c->current_bytes += bytes;
    c->num_allocs += 1;
    c->peak_bytes = std::max(c->peak_bytes, c->current_bytes);
  }
}

void MemoryAccounting::record_free(AccelMemoryPlace place, AccelMemoryCategory category, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (MemoryCounters* c : {&slot(place, category), &slot(place, ACCEL_MEMORY_ALL)}) {
    c->current_bytes -= bytes;
    c->num_allocs -= 1;
  }
}

MemoryCounters MemoryAccounting::counters(AccelMemoryPlace place, AccelMemoryCategory category) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_.at(static_cast<size_t>(place)).at(static_cast<size_t>(category));
}

void MemoryAccounting::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& place : counters_) {
    for (MemoryCounters& c : place) c.peak_bytes = c.current_bytes;
  }
}

std::string MemoryAccounting::describe_usage(AccelMemoryPlace place) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string text;
  const auto& row = counters_.at(static_cast<size_t>(place));
  for (int c = 1; c < kNumCategories; ++c) {
    if (row[c].current_bytes == 0) continue;
    if (!text.empty()) text += ", ";
    text += std::string(category_name(static_cast<AccelMemoryCategory>(c))) + " " +
            format_bytes(static_cast<double>(row[c].current_bytes));
  }
  return text.empty() ? "nothing allocated" : text;
}

namespace {
uintptr_t begin_of(const AccelBuffer* buffer) {
  return reinterpret_cast<uintptr_t>(accel_tensor_begin(buffer->view.get()));
}
}  // namespace

void MemoryAccounting::add_buffer(AccelBuffer* buffer) {
  std::lock_guard<std::mutex> lock(mutex_);
  buffers_.insert(buffer);
  by_address_[begin_of(buffer)] = buffer;
}

bool MemoryAccounting::remove_buffer(AccelBuffer* buffer) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (buffers_.erase(buffer) != 1) return false;
  const auto it = by_address_.find(begin_of(buffer));
  if (it != by_address_.end() && it->second == buffer) by_address_.erase(it);
  return true;
}

std::optional<BufferExtent> MemoryAccounting::find_extent(const void* address) const {
  const auto a = reinterpret_cast<uintptr_t>(address);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = by_address_.upper_bound(a);
  if (it == by_address_.begin()) return std::nullopt;
  --it;
  const AccelBuffer* b = it->second;
  const uintptr_t end = it->first + static_cast<uintptr_t>(b->bytes);
  if (a != it->first && a >= end) return std::nullopt;
  const DLTensor* t = b->view.get();
  int64_t numel = 1;
  for (int32_t d = 0; d < t->ndim; ++d) numel *= t->shape[d];
  return BufferExtent{it->first, b->bytes, t->dtype, numel, b->label, b->owner};
}

void MemoryAccounting::add_stream(AccelStreamOpaque* stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  streams_.insert(stream);
}

bool MemoryAccounting::remove_stream(AccelStreamOpaque* stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  return streams_.erase(stream) == 1;
}

bool MemoryAccounting::has_stream(const AccelStreamOpaque* stream) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return streams_.count(stream) == 1;
}

void MemoryAccounting::add_event(AccelEvent* event) {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.insert(event);
}

bool MemoryAccounting::remove_event(AccelEvent* event) {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_.erase(event) == 1;
}

bool MemoryAccounting::has_event(const AccelEvent* event) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_.count(event) == 1;
}

int64_t MemoryAccounting::live_buffers(std::string_view owner) const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t n = 0;
  for (const AccelBuffer* b : buffers_) n += b->owner == owner ? 1 : 0;
  return n;
}

int64_t MemoryAccounting::live_bytes(std::string_view owner) const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t bytes = 0;
  for (const AccelBuffer* b : buffers_) bytes += b->owner == owner ? b->bytes : 0;
  return bytes;
}

int64_t MemoryAccounting::free_leaked(std::string_view owner) {
  std::vector<AccelBuffer*> leaked;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (AccelBuffer* b : buffers_) {
      if (b->owner == owner) leaked.push_back(b);
    }
    for (AccelBuffer* b : leaked) {
      buffers_.erase(b);
      by_address_.erase(begin_of(b));
    }
  }
  for (AccelBuffer* b : leaked) {
    record_free(b->place, b->category, b->bytes);
    delete b;
  }
  return static_cast<int64_t>(leaked.size());
}

MemoryAccounting::~MemoryAccounting() {
  for (AccelBuffer* b : buffers_) delete b;
  for (const AccelStreamOpaque* s : streams_) delete s;
  for (const AccelEvent* e : events_) delete e;
}

// ---------------------------------------------------------------------------
// Services
// ---------------------------------------------------------------------------
namespace {

// The host's streams on CPU ranks: immutable tokens, one per role.
AccelStreamOpaque* host_stream(AccelStreamRole role) {
  static AccelStreamOpaque comm{ACCEL_STREAM_COMM, true};
  static AccelStreamOpaque copy_in{ACCEL_STREAM_COPY_IN, true};
  static AccelStreamOpaque copy_out{ACCEL_STREAM_COPY_OUT, true};
  switch (role) {
    case ACCEL_STREAM_COMM: return &comm;
    case ACCEL_STREAM_COPY_IN: return &copy_in;
    case ACCEL_STREAM_COPY_OUT: return &copy_out;
    default: return nullptr;  // compute: NULL, as in arguments
  }
}

bool on_cuda(const HostContext& context) { return context.identity.device.device_type == kDLCUDA; }

[[noreturn]] void cuda_streams_unsupported(const char* what) {
  fail(ACCEL_ERROR_UNSUPPORTED,
       std::string(what) + " on a CUDA rank arrives with the CUDA stream layer; this host runs "
                           "device work on the compute stream (NULL) only");
}

void check_stream(const HostContext& context, AccelStream stream, const char* what) {
  if (stream == nullptr || context.memory->has_stream(stream)) return;
  for (AccelStreamRole role : {ACCEL_STREAM_COMM, ACCEL_STREAM_COPY_IN, ACCEL_STREAM_COPY_OUT}) {
    if (stream == host_stream(role)) return;
  }
  fail(ACCEL_ERROR_INVALID_ARGUMENT, std::string(what) + " is not a stream of this host");
}

void check_event(const HostContext& context, const AccelEvent* event, const char* what) {
  if (event == nullptr || !context.memory->has_event(event)) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT, std::string(what) + " is not a live event from event_create");
  }
}

// The ABI asks an out-of-memory message for the bytes requested and the
// rank's usage by category.
[[noreturn]] void fail_out_of_memory(const HostContext& context, const AccelAllocateArgs& args,
                                     int64_t bytes) {
  fail(ACCEL_ERROR_OUT_OF_MEMORY,
       strformat("out of memory allocating %s (%s, %s%s%s) in %s memory; rank usage there: %s",
                 format_bytes(static_cast<double>(bytes)).c_str(), category_name(args.category),
                 describe_dtype(args.dtype).c_str(), args.label == nullptr ? "" : ", ",
                 args.label == nullptr ? "" : args.label, place_name(args.place),
                 context.memory->describe_usage(args.place).c_str()));
}

AccelStatus allocate(AccelHost* host, AccelAllocateArgs* args) {
  return call_service("allocate", [&] {
    ACCEL_REQUIRE_ARGS(args, AccelAllocateArgs, tensor);
    HostContext& context = context_of(host);
    if (args->place < ACCEL_MEMORY_DEVICE || args->place > ACCEL_MEMORY_HOST_PINNED) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, strformat("unknown place %d", static_cast<int>(args->place)));
    }
    if (args->category <= ACCEL_MEMORY_ALL || args->category > ACCEL_MEMORY_OTHER) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT,
           strformat("category %d is not one a buffer can have (PARAMS..OTHER)", static_cast<int>(args->category)));
    }
    if (!is_abi_dtype(args->dtype)) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, "unknown dtype (" + describe_dtype(args->dtype) + ")");
    }
    if (args->ndim < 0 || (args->ndim > 0 && args->shape == nullptr)) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, strformat("ndim %d with shape %s", args->ndim,
                                                   args->shape == nullptr ? "NULL" : "set"));
    }
    const uint64_t alignment = args->alignment == 0 ? 256 : args->alignment;
    if ((alignment & (alignment - 1)) != 0) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, strformat("alignment %u is not a power of two", args->alignment));
    }
    std::vector<int64_t> shape(args->shape, args->shape + args->ndim);
    int64_t numel = 1;
    for (int64_t extent : shape) {
      if (extent < 0 || __builtin_mul_overflow(numel, extent, &numel)) {
        fail(ACCEL_ERROR_INVALID_ARGUMENT, "shape " + describe_shape(shape) + " is negative or overflows");
      }
    }
    const int64_t bits_total = numel * args->dtype.bits;  // < 2^63 / 8 for any real request
    const int64_t bytes = (bits_total + 7) / 8;

    DLDevice device{kDLCPU, 0};
    at::TensorOptions options = at::TensorOptions().dtype(at::kByte);
    if (args->place == ACCEL_MEMORY_DEVICE) {
      device = context.identity.device;
      options = options.device(to_aten_device(device, "the rank's device"));
    } else if (args->place == ACCEL_MEMORY_HOST_PINNED && at::hasCUDA()) {
      device = DLDevice{kDLCUDAHost, 0};
      options = options.pinned_memory(true);
    }  // pinned without CUDA: pageable memory, still accounted as pinned

    auto buffer = std::make_unique<AccelBuffer>();
    try {
      buffer->storage = at::empty({bytes + static_cast<int64_t>(alignment)}, options);
    } catch (const c10::OutOfMemoryError&) {
      fail_out_of_memory(context, *args, bytes);
    } catch (const std::bad_alloc&) {
      fail_out_of_memory(context, *args, bytes);
    }
    const auto base = reinterpret_cast<uintptr_t>(buffer->storage.data_ptr());
    const uintptr_t aligned = (base + alignment - 1) & ~static_cast<uintptr_t>(alignment - 1);
    const int64_t offset = static_cast<int64_t>(aligned - base);
    if ((args->flags & ACCEL_ALLOCATE_ZERO_FILL) != 0) buffer->storage.narrow(0, offset, bytes).zero_();
    buffer->view.reset_raw(buffer->storage, reinterpret_cast<void*>(aligned), args->dtype, device,
                           std::move(shape));
    buffer->place = args->place;
    buffer->category = args->category;
    buffer->bytes = bytes;
    buffer->label = args->label == nullptr ? "" : args->label;
    buffer->owner = plugin_name_of(host);

    context.memory->record_allocate(buffer->place, buffer->category, bytes);
    AccelBuffer* raw = buffer.release();
    context.memory->add_buffer(raw);
    args->buffer = raw;
    args->tensor = raw->view.get();
    if (trace_capturing(context)) {
      TraceEventFields event;
      event.name = "allocate";
      event.category = "memory";
      event.source = plugin_name_of(host).c_str();
      event.bytes = bytes;
      event.detail = raw->label.empty() ? category_name(raw->category) : raw->label.c_str();
      emit_trace_event(context, event);
    }
  });
}

AccelStatus deallocate(AccelHost* host, AccelBuffer* buffer, AccelStream stream) {
  return call_service("deallocate", [&] {
    if (buffer == nullptr) return;
    HostContext& context = context_of(host);
    check_stream(context, stream, "stream");
    if (!context.memory->remove_buffer(buffer)) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, "buffer is not a live buffer from allocate (freed twice?)");
    }
    context.memory->record_free(buffer->place, buffer->category, buffer->bytes);
    if (trace_capturing(context)) {
      TraceEventFields event;
      event.name = "deallocate";
      event.category = "memory";
      event.source = plugin_name_of(host).c_str();
      event.bytes = buffer->bytes;
      emit_trace_event(context, event);
    }
    // CPU work is synchronous, and ATen's CUDA caching allocator orders the
    // reuse of freed memory on the compute stream: freeing now is safe.
    delete buffer;
  });
}

AccelStatus copy(AccelHost* host, const AccelCopyArgs* args) {
  return call_service("copy", [&] {
    ACCEL_REQUIRE_ARGS(args, AccelCopyArgs, stream);
    HostContext& context = context_of(host);
    check_stream(context, args->stream, "stream");
    const at::Tensor src = to_aten(args->src, "src");
    at::Tensor dst = to_aten(args->dst, "dst");
    if (!accel_dtype_equal(args->src->dtype, args->dst->dtype) || !src.sizes().equals(dst.sizes())) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, "src is " + describe_dtype(args->src->dtype) + " " +
                                             describe_shape(src.sizes()) + " but dst is " +
                                             describe_dtype(args->dst->dtype) + " " + describe_shape(dst.sizes()));
    }
    // Since 1.15; an older plugin's args end before them (no flags).
    uint32_t flags = 0;
    if (ACCEL_STRUCT_HAS_FIELD(args, AccelCopyArgs, reserved)) {
      if (args->reserved != 0) fail(ACCEL_ERROR_INVALID_ARGUMENT, "reserved must be 0");
      flags = args->flags;
    }
    // A deferred read lets a device-to-pinned copy go unwaited: the host's
    // next synchronisation of the compute stream (its one read of the step)
    // lands it before the caller looks (ACCEL_COPY_DEFERRED_READ).
    const bool deferred = (flags & ACCEL_COPY_DEFERRED_READ) != 0 && src.is_cuda() && dst.is_cpu() && dst.is_pinned();
    dst.copy_(src, /*non_blocking=*/deferred);
  });
}

AccelStatus stats(AccelHost* host, AccelMemoryPlace place, AccelMemoryCategory category,
                  AccelMemoryStats* out) {
  return call_service("stats", [&] {
    HostContext& context = context_of(host);
    if (out == nullptr) fail(ACCEL_ERROR_INVALID_ARGUMENT, "stats is NULL");
    if (place < ACCEL_MEMORY_DEVICE || place > ACCEL_MEMORY_HOST_PINNED ||
        category < ACCEL_MEMORY_ALL || category > ACCEL_MEMORY_OTHER) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT,
           strformat("unknown place %d or category %d", static_cast<int>(place), static_cast<int>(category)));
    }
    const MemoryCounters c = context.memory->counters(place, category);
    // Caller-owned out struct: write only what its struct_size covers.
    if (ACCEL_STRUCT_HAS_FIELD(out, AccelMemoryStats, current_bytes)) out->current_bytes = c.current_bytes;
    if (ACCEL_STRUCT_HAS_FIELD(out, AccelMemoryStats, peak_bytes)) out->peak_bytes = c.peak_bytes;
    if (ACCEL_STRUCT_HAS_FIELD(out, AccelMemoryStats, num_allocs)) out->num_allocs = c.num_allocs;
  });
}

AccelStatus reset_peak(AccelHost* host) {
  return call_service("reset_peak", [&] { context_of(host).memory->reset_peak(); });
}

AccelStatus stream_get(AccelHost* host, AccelStreamRole role, AccelStream* stream) {
  return call_service("stream_get", [&] {
    HostContext& context = context_of(host);
    if (stream == nullptr) fail(ACCEL_ERROR_INVALID_ARGUMENT, "stream is NULL");
    if (role < ACCEL_STREAM_COMPUTE || role > ACCEL_STREAM_COPY_OUT) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, strformat("unknown stream role %d", static_cast<int>(role)));
    }
    if (on_cuda(context) && role != ACCEL_STREAM_COMPUTE) cuda_streams_unsupported("stream_get of a non-compute role");
    *stream = host_stream(role);
  });
}

AccelStatus stream_create(AccelHost* host, int32_t /*priority*/, AccelStream* stream) {
  return call_service("stream_create", [&] {
    HostContext& context = context_of(host);
    if (stream == nullptr) fail(ACCEL_ERROR_INVALID_ARGUMENT, "stream is NULL");
    if (on_cuda(context)) cuda_streams_unsupported("stream_create");
    auto* created = new AccelStreamOpaque{ACCEL_STREAM_COMPUTE, false};
    context.memory->add_stream(created);
    *stream = created;
  });
}

AccelStatus stream_destroy(AccelHost* host, AccelStream stream) {
  return call_service("stream_destroy", [&] {
    HostContext& context = context_of(host);
    if (stream == nullptr || !context.memory->remove_stream(stream)) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, "stream was not created by stream_create (or was destroyed)");
    }
    delete stream;
  });
}

AccelStatus stream_synchronize(AccelHost* host, AccelStream stream) {
  return call_service("stream_synchronize", [&] {
    HostContext& context = context_of(host);
    check_stream(context, stream, "stream");
    // A range on every rank, a no-op on the CPU included, so the CPU test of
    // host synchronisations per step (tests/python/test_host_syncs.py)
    // counts a plugin's as a GPU would feel them.
    const TraceRange range(&context, "stream_synchronize", "host");
    if (on_cuda(context)) at::accelerator::synchronizeDevice(context.identity.device.device_id);
  });
}

AccelStatus event_create(AccelHost* host, AccelEvent** event) {
  return call_service("event_create", [&] {
    HostContext& context = context_of(host);
    if (event == nullptr) fail(ACCEL_ERROR_INVALID_ARGUMENT, "event is NULL");
    if (on_cuda(context)) cuda_streams_unsupported("event_create");
    auto* created = new AccelEvent;
    context.memory->add_event(created);
    *event = created;
  });
}

AccelStatus event_destroy(AccelHost* host, AccelEvent* event) {
  return call_service("event_destroy", [&] {
    if (event == nullptr) return;
    if (!context_of(host).memory->remove_event(event)) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, "event was not created by event_create (or was destroyed)");
    }
    delete event;
  });
}

AccelStatus event_record(AccelHost* host, AccelEvent* event, AccelStream stream) {
  return call_service("event_record", [&] {
    HostContext& context = context_of(host);
    check_event(context, event, "event");
    check_stream(context, stream, "stream");
    event->recorded_ns = monotonic_ns();
  });
}

AccelStatus stream_wait_event(AccelHost* host, AccelStream stream, AccelEvent* event) {
  return call_service("stream_wait_event", [&] {
    HostContext& context = context_of(host);
    check_stream(context, stream, "stream");
    check_event(context, event, "event");
  });
}

AccelStatus event_query(AccelHost* host, AccelEvent* event, bool* done) {
  return call_service("event_query", [&] {
    HostContext& context = context_of(host);
    check_event(context, event, "event");
    if (done == nullptr) fail(ACCEL_ERROR_INVALID_ARGUMENT, "done is NULL");
    *done = true;  // CPU work is synchronous (an unrecorded event counts as complete, as in CUDA)
  });
}

AccelStatus event_synchronize(AccelHost* host, AccelEvent* event) {
  return call_service("event_synchronize", [&] { check_event(context_of(host), event, "event"); });
}

AccelStatus event_elapsed(AccelHost* host, const AccelEvent* start, const AccelEvent* end, double* elapsed_ms) {
  return call_service("event_elapsed", [&] {
    HostContext& context = context_of(host);
    check_event(context, start, "start");
    check_event(context, end, "end");
    if (elapsed_ms == nullptr) fail(ACCEL_ERROR_INVALID_ARGUMENT, "elapsed_ms is NULL");
    if (start->recorded_ns < 0 || end->recorded_ns < 0) {
      fail(ACCEL_ERROR_FAILED_PRECONDITION, "both events must have been recorded");
    }
    *elapsed_ms = static_cast<double>(end->recorded_ns - start->recorded_ns) / 1e6;
  });
}

}  // namespace

const AccelMemoryServices* memory_services_table() {
  static const AccelMemoryServices table{sizeof(AccelMemoryServices),
                                         nullptr,
                                         &allocate,
                                         &deallocate,
                                         &copy,
                                         &stats,
                                         &reset_peak,
                                         &stream_get,
                                         &stream_create,
                                         &stream_destroy,
                                         &stream_synchronize,
                                         &event_create,
                                         &event_destroy,
                                         &event_record,
                                         &stream_wait_event,
                                         &event_query,
                                         &event_synchronize,
                                         &event_elapsed};
  return &table;
}

}  // namespace accel::runtime
