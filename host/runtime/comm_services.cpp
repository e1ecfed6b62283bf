// The collective area of the services table (accel/comm.h) over the host's
// process groups (host/comm/): DLTensor views become comm::Buffers, and every
// failure — invalid request, timeout, a rank lost, a rank that diverged —
// comes back as a status with the message naming the rank and the
// operation. Group management is in comm_group_services.cpp.
//
// Before a collective leaves the host it is checked (comm_checks.h): its
// group handle against the handle table, each tensor's extent against the
// allocation it points into, and its descriptor is recorded in (verify
// mode: compared through) its group's sequence check. A wait on a
// collective polls every group's sequence check, so a rank blocked in a
// collective a peer skipped fails at once naming both operations.
//
// Each collective is a trace range of category "comm" (trace_scope.h) from
// its issue through its wait when synchronous; an asynchronous one is a short
// issue range and a later "wait" range; both carry the communicator's
// sequence number and the group's ranks, which is how the profiler joins the
// ranks' parts of one collective.
//
// Thread-safety: collectives on the loop thread; work handles may be waited
// on from any thread (the handle table and comm::Work are thread-safe).
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "host/comm/process_group.h"
#include "host/runtime/comm_checks.h"
#include "host/runtime/host_context.h"
#include "host/runtime/service_support.h"
#include "host/runtime/trace_scope.h"

namespace accel::runtime {
namespace {

using comm::Buffer;
using comm::DType;

DType dtype_of(DLDataType t) {
  if (t.lanes != 1) fail(ACCEL_ERROR_INVALID_ARGUMENT, "vector dtypes (lanes != 1) are not supported");
  switch (t.code) {
    case kDLFloat:
      if (t.bits == 32) return DType::f32;
      if (t.bits == 64) return DType::f64;
      if (t.bits == 16) return DType::f16;
      break;
    case kDLBfloat:
      if (t.bits == 16) return DType::bf16;
      break;
    case kDLInt:
      if (t.bits == 8) return DType::i8;
      if (t.bits == 32) return DType::i32;
      if (t.bits == 64) return DType::i64;
      break;
    case kDLUInt:
      if (t.bits == 8) return DType::u8;
      break;
    default:
      if (t.code == ACCEL_DL_FLOAT8_E4M3FN && t.bits == 8) return DType::f8_e4m3;
      if (t.code == ACCEL_DL_FLOAT8_E5M2 && t.bits == 8) return DType::f8_e5m2;
  }
  fail(ACCEL_ERROR_UNSUPPORTED, "dtype (code " + std::to_string(t.code) + ", " + std::to_string(t.bits) +
                                    " bits) cannot travel through a collective");
}

// A contiguous tensor as a comm buffer.
Buffer buffer_of(const DLTensor* t, const char* role) {
  if (!t) fail(ACCEL_ERROR_INVALID_ARGUMENT, std::string(role) + " is NULL");
  if (!t->strides && t->ndim > 0) fail(ACCEL_ERROR_INVALID_ARGUMENT, std::string(role) + " has NULL strides");
  int64_t count = 1, expected_stride = 1;
  for (int32_t d = t->ndim - 1; d >= 0; --d) {
    if (t->shape[d] != 1 && t->strides[d] != expected_stride) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, std::string(role) + " is not contiguous");
    }
    expected_stride *= t->shape[d];
    count *= t->shape[d];
  }
  Buffer b;
  b.data = static_cast<char*>(t->data) + t->byte_offset;
  b.count = count;
  b.dtype = dtype_of(t->dtype);
  b.on_cuda = t->device.device_type == kDLCUDA;
  b.device = t->device.device_id;
  return b;
}

comm::ReduceOp op_of(AccelReduceOp op) {
  switch (op) {
    case ACCEL_REDUCE_SUM: return comm::ReduceOp::sum;
    case ACCEL_REDUCE_AVG: return comm::ReduceOp::avg;
    case ACCEL_REDUCE_MAX: return comm::ReduceOp::max;
    case ACCEL_REDUCE_MIN: return comm::ReduceOp::min;
    default: fail(ACCEL_ERROR_INVALID_ARGUMENT, "unknown reduce op " + std::to_string(op));
  }
}

AccelStatus status_of(const comm::Status& s) {
  switch (s.code) {
    case comm::ErrorCode::ok: return ACCEL_OK;
    case comm::ErrorCode::invalid_argument: return ACCEL_ERROR_INVALID_ARGUMENT;
    case comm::ErrorCode::unsupported: return ACCEL_ERROR_UNSUPPORTED;
    case comm::ErrorCode::failed_precondition: return ACCEL_ERROR_FAILED_PRECONDITION;
    case comm::ErrorCode::timeout: return ACCEL_ERROR_TIMEOUT;
    case comm::ErrorCode::aborted: return ACCEL_ERROR_ABORTED;
    default: return ACCEL_ERROR_INTERNAL;
  }
}

// Sync: waits (polling the sequence checks) and fails with the operation's
// status. Async: hands out a handle from the work table.
void finish(HostContext& context, std::shared_ptr<comm::Work> work, const std::shared_ptr<GroupEntry>& group,
            AccelWork** out) {
  if (out) {
    auto entry = std::make_shared<WorkEntry>();
    entry->work = std::move(work);
    entry->group = group;
    *out = work_handle(handles_of(context).works.add(std::move(entry)));
    return;
  }
  const comm::Status s = work->wait(0, [&] { poll_sequences(context); });
  if (!s.ok()) fail(status_of(s), s.message);
}

comm::OpOptions options_of(const AccelCollectiveArgs* a) {
  comm::OpOptions o;
  o.timeout_ms = a->timeout_ms;
  if (a->label) o.label = a->label;
  return o;
}

// A tensor as a buffer, after the extent check against its allocation.
Buffer checked_buffer(HostContext& context, const DLTensor* t, const char* role) {
  const Buffer b = buffer_of(t, role);
  check_tensor_memory(context, t, static_cast<int64_t>(b.bytes()), role, handles_of(context).verify.strict_memory);
  return b;
}

// Records the collective in its group's sequence check (verify mode: first
// compares it with the ring neighbour's).
void sequence(HostContext& context, const ResolvedGroup& g, comm::OpType op, const Buffer* buffer, int reduce,
              int peer, const AccelCollectiveArgs* a) {
  if (!g.entry || !g.entry->sequence) return;
  comm::OpDescriptor d;
  d.op = op;
  if (buffer) {
    d.dtype = buffer->dtype;
    d.count = buffer->count;
  }
  d.reduce = reduce;
  d.peer = peer;
  if (a->label) d.label = a->label;
  try {
    g.entry->sequence->before_op(d, context.step.load());
  } catch (const comm::CommError& e) {
    fail(status_of(comm::Status::error(e.code(), "")), e.what());
  }
}

// "seq=12; group_ranks=0,1; label=ddp bucket all_reduce": the trace detail
// that identifies one collective on every rank of its group.
std::string collective_detail(const comm::Work& work, const GroupEntry* group, const char* label, bool async) {
  std::string detail = "seq=" + std::to_string(work.seq()) + "; group_ranks=";
  if (group) {
    for (size_t i = 0; i < group->ranks.size(); ++i) detail += (i ? "," : "") + std::to_string(group->ranks[i]);
  }
  if (label) detail += std::string("; label=") + label;
  if (async) detail += "; async=1";
  return detail;
}

// One entry point per collective kind; the shared checks and accounting here.
// `name` is "comm.all_reduce"; the trace range drops the "comm." prefix.
template <class Body>
AccelStatus collective(const char* name, AccelHost* host, const AccelCollectiveArgs* args, AccelWork** work,
                       Body&& body) {
  return call_service(name, [&] {
    ACCEL_REQUIRE_ARGS(args, AccelCollectiveArgs, label);
    HostContext& context = context_of(host);
    const ResolvedGroup group = resolve_group(context, args->group);
    // The range opens before the issue, so on every rank it covers the
    // whole of its part (a peer may finish as soon as this rank issued).
    TraceRange range(&context, name + 5, "comm", host->plugin_name.c_str(), [] { return std::string(); });
    const int64_t bytes_before = context.comm_bytes.load();
    std::shared_ptr<comm::Work> w = body(group, context);
    if (range.recording()) {
      range.set_end_detail(collective_detail(*w, group.entry.get(), args->label, work != nullptr),
                           context.comm_bytes.load() - bytes_before);
    }
    finish(context, std::move(w), group.entry, work);
  });
}

AccelStatus all_reduce(AccelHost* host, const AccelCollectiveArgs* a, AccelWork** work) {
  return collective("comm.all_reduce", host, a, work, [&](const ResolvedGroup& g, HostContext& c) {
    const Buffer in = checked_buffer(c, a->input, "input"), out = checked_buffer(c, a->output, "output");
    const comm::ReduceOp op = op_of(a->op);
    sequence(c, g, comm::OpType::all_reduce, &in, static_cast<int>(op), -1, a);
    c.comm_bytes += static_cast<int64_t>(in.bytes());
    return g.group->all_reduce_async(in, out, op, options_of(a));
  });
}

AccelStatus all_gather(AccelHost* host, const AccelCollectiveArgs* a, AccelWork** work) {
  return collective("comm.all_gather", host, a, work, [&](const ResolvedGroup& g, HostContext& c) {
    const Buffer in = checked_buffer(c, a->input, "input"), out = checked_buffer(c, a->output, "output");
    sequence(c, g, comm::OpType::all_gather, &in, -1, -1, a);
    c.comm_bytes += static_cast<int64_t>(out.bytes());  // the gathered (full) tensor
    return g.group->all_gather_async(in, out, options_of(a));
  });
}

AccelStatus reduce_scatter(AccelHost* host, const AccelCollectiveArgs* a, AccelWork** work) {
  return collective("comm.reduce_scatter", host, a, work, [&](const ResolvedGroup& g, HostContext& c) {
    const Buffer in = checked_buffer(c, a->input, "input"), out = checked_buffer(c, a->output, "output");
    const comm::ReduceOp op = op_of(a->op);
    sequence(c, g, comm::OpType::reduce_scatter, &in, static_cast<int>(op), -1, a);
    c.comm_bytes += static_cast<int64_t>(in.bytes());
    return g.group->reduce_scatter_async(in, out, op, options_of(a));
  });
}

AccelStatus broadcast(AccelHost* host, const AccelCollectiveArgs* a, AccelWork** work) {
  return collective("comm.broadcast", host, a, work, [&](const ResolvedGroup& g, HostContext& c) {
    const Buffer out = checked_buffer(c, a->output, "output");
    sequence(c, g, comm::OpType::broadcast, &out, -1, a->peer, a);
    c.comm_bytes += static_cast<int64_t>(out.bytes());
    return g.group->broadcast_async(out, a->peer, options_of(a));
  });
}

AccelStatus all_to_all(AccelHost* host, const AccelCollectiveArgs* a, AccelWork** work) {
  return collective("comm.all_to_all", host, a, work, [&](const ResolvedGroup& g, HostContext& c) {
    const Buffer in = checked_buffer(c, a->input, "input"), out = checked_buffer(c, a->output, "output");
    sequence(c, g, comm::OpType::all_to_all, &in, -1, -1, a);
    c.comm_bytes += static_cast<int64_t>(in.bytes());
    return g.group->all_to_all_async(in, out, options_of(a));
  });
}

AccelStatus all_to_all_v(AccelHost* host, const AccelCollectiveArgs* a, const int64_t* send_counts,
                         const int64_t* recv_counts, AccelWork** work) {
  return collective("comm.all_to_all_v", host, a, work, [&](const ResolvedGroup& g, HostContext& c) {
    if (send_counts == nullptr || recv_counts == nullptr) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, std::string("all_to_all_v: ") +
                                             (send_counts == nullptr ? "send_counts" : "recv_counts") + " is NULL");
    }
    const Buffer in = checked_buffer(c, a->input, "input"), out = checked_buffer(c, a->output, "output");
    const auto size = static_cast<size_t>(g.group->size());
    const std::span<const int64_t> sends(send_counts, size), receives(recv_counts, size);
    // The counts differ between ranks; what every rank shares is the
    // operation, the dtype and the group's size.
    Buffer described = in;
    described.count = static_cast<int64_t>(size);
    sequence(c, g, comm::OpType::all_to_all_v, &described, -1, -1, a);
    c.comm_bytes += static_cast<int64_t>(in.bytes());
    return g.group->all_to_all_v_async(in, sends, out, receives, options_of(a));
  });
}

// The send/recv batch open on this thread (batch_begin .. batch_end): its
// operations are issued together, so a pipeline stage may send to and receive
// from its neighbours in any order without deadlock.
struct OpenBatch {
  bool open = false;
  comm::ProcessGroup* group = nullptr;
  std::shared_ptr<GroupEntry> entry;
  std::vector<comm::P2POp> ops;
  std::string label;
};
thread_local OpenBatch t_batch;

// Queues a send or recv in the open batch instead of issuing it.
void queue_p2p(HostContext& context, const AccelCollectiveArgs* a, AccelWork** work, comm::P2POp::Kind kind) {
  if (work) fail(ACCEL_ERROR_INVALID_ARGUMENT, "inside a batch, send/recv take work == NULL (batch_end returns it)");
  const ResolvedGroup group = resolve_group(context, a->group);
  if (t_batch.group && t_batch.group != group.group) fail(ACCEL_ERROR_INVALID_ARGUMENT, "a batch spans one group");
  t_batch.group = group.group;
  t_batch.entry = group.entry;
  comm::P2POp op;
  op.kind = kind;
  op.buffer = checked_buffer(context, kind == comm::P2POp::Kind::send ? a->input : a->output,
                             kind == comm::P2POp::Kind::send ? "input" : "output");
  op.peer = a->peer;
  if (kind == comm::P2POp::Kind::send) context.comm_bytes += static_cast<int64_t>(op.buffer.bytes());
  if (t_batch.label.empty() && a->label) t_batch.label = a->label;
  t_batch.ops.push_back(op);
}

AccelStatus point_to_point(const char* name, AccelHost* host, const AccelCollectiveArgs* a, AccelWork** work,
                           comm::P2POp::Kind kind) {
  return call_service(name, [&] {
    ACCEL_REQUIRE_ARGS(a, AccelCollectiveArgs, label);
    HostContext& context = context_of(host);
    if (t_batch.open) {
      queue_p2p(context, a, work, kind);
      return;
    }
    // Point-to-point pairs differ by rank: they are not part of the
    // sequence check (which compares what every rank of a group issues).
    const ResolvedGroup g = resolve_group(context, a->group);
    if (kind == comm::P2POp::Kind::send) {
      const Buffer in = checked_buffer(context, a->input, "input");
      context.comm_bytes += static_cast<int64_t>(in.bytes());
      finish(context, g.group->send_async(in, a->peer, 0, options_of(a)), g.entry, work);
    } else {
      finish(context, g.group->recv_async(checked_buffer(context, a->output, "output"), a->peer, 0, options_of(a)),
             g.entry, work);
    }
  });
}

AccelStatus send(AccelHost* host, const AccelCollectiveArgs* a, AccelWork** work) {
  return point_to_point("comm.send", host, a, work, comm::P2POp::Kind::send);
}

AccelStatus recv(AccelHost* host, const AccelCollectiveArgs* a, AccelWork** work) {
  return point_to_point("comm.recv", host, a, work, comm::P2POp::Kind::recv);
}

AccelStatus barrier(AccelHost* host, const AccelCollectiveArgs* a, AccelWork** work) {
  return collective("comm.barrier", host, a, work, [&](const ResolvedGroup& g, HostContext& c) {
    sequence(c, g, comm::OpType::barrier, nullptr, -1, -1, a);
    return g.group->barrier_async(options_of(a));
  });
}

AccelStatus batch_begin(AccelHost* host) {
  return call_service("comm.batch_begin", [&] {
    context_of(host);
    if (t_batch.open) fail(ACCEL_ERROR_FAILED_PRECONDITION, "batches do not nest");
    t_batch = OpenBatch{};
    t_batch.open = true;
  });
}

AccelStatus batch_end(AccelHost* host, AccelWork** work) {
  return call_service("comm.batch_end", [&] {
    context_of(host);
    if (!t_batch.open) fail(ACCEL_ERROR_FAILED_PRECONDITION, "batch_end without batch_begin");
    OpenBatch batch = std::move(t_batch);
    t_batch = OpenBatch{};
    if (batch.ops.empty()) {
      if (work) *work = nullptr;
      return;
    }
    comm::OpOptions options;
    options.label = batch.label;
    finish(context_of(host), batch.group->batch_p2p_async(batch.ops, options), batch.entry, work);
  });
}

// The entry behind a work handle; a bogus or freed handle is refused.
std::shared_ptr<WorkEntry> work_of(HostContext& context, AccelWork* work) {
  HandleProblem problem = HandleProblem::kOk;
  std::shared_ptr<WorkEntry> entry = handles_of(context).works.find(handle_value(work), &problem);
  if (!entry) fail(ACCEL_ERROR_INVALID_ARGUMENT, describe_handle_problem(problem, "work", "freed", handle_value(work)));
  return entry;
}

AccelStatus wait_for(const char* name, AccelHost* host, AccelWork* work) {
  return call_service(name, [&] {
    HostContext& context = context_of(host);
    const std::shared_ptr<WorkEntry> entry = work_of(context, work);
    const TraceRange range(&context, "wait", "comm", host->plugin_name.c_str(), [&] {
      return collective_detail(*entry->work, entry->group.get(), nullptr, false);
    });
    const comm::Status s = entry->work->wait(0, [&] { poll_sequences(context); });
    if (!s.ok()) fail(status_of(s), s.message);
  });
}

AccelStatus work_wait(AccelHost* host, AccelWork* work, AccelStream) {
  return wait_for("comm.work_wait", host, work);
}

AccelStatus work_synchronize(AccelHost* host, AccelWork* work) {
  return wait_for("comm.work_synchronize", host, work);
}

AccelStatus work_test(AccelHost* host, AccelWork* work, bool* done) {
  return call_service("comm.work_test", [&] {
    if (!done) fail(ACCEL_ERROR_INVALID_ARGUMENT, "done is NULL");
    HostContext& context = context_of(host);
    const std::shared_ptr<WorkEntry> entry = work_of(context, work);
    *done = entry->work->test();
    if (*done) {
      const comm::Status s = entry->work->status();
      if (!s.ok()) fail(status_of(s), s.message);
    } else {
      poll_sequences(context);
    }
  });
}

AccelStatus work_free(AccelHost* host, AccelWork* work) {
  return call_service("comm.work_free", [&] {
    if (!work) return;
    HostContext& context = context_of(host);
    if (!work_of(context, work)->work->finished()) {
      fail(ACCEL_ERROR_FAILED_PRECONDITION, "work freed before wait/test observed its completion");
    }
    handles_of(context).works.remove(handle_value(work), nullptr);
  });
}

}  // namespace

const AccelCommServices* comm_services_table() {
  static const AccelCommServices table = [] {
    AccelCommServices t{};
    t.struct_size = sizeof(t);
    fill_group_services(t);
    t.all_reduce = &all_reduce;
    t.all_gather = &all_gather;
    t.reduce_scatter = &reduce_scatter;
    t.broadcast = &broadcast;
    t.all_to_all = &all_to_all;
    t.all_to_all_v = &all_to_all_v;
    t.send = &send;
    t.recv = &recv;
    t.barrier = &barrier;
    t.batch_begin = &batch_begin;
    t.batch_end = &batch_end;
    t.work_wait = &work_wait;
    t.work_synchronize = &work_synchronize;
    t.work_test = &work_test;
    t.work_free = &work_free;
    return t;
  }();
  return &table;
}

}  // namespace accel::runtime
