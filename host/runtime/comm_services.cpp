// The comm area of the services table (accel/comm.h) over the host's process
// groups (host/comm/): DLTensor views become comm::Buffers, AccelGroup and
// AccelWork wrap a group and a Work, and every failure — invalid request,
// timeout, a rank lost — comes back as a status with the message naming the
// rank and the operation.
//
// Standard groups come from the mesh the plugins declared; this host version
// resolves meshes with tensor = pipeline = 1 (data, sharding and replica
// groups), which is what data-parallel strategies need; tensor and pipeline
// meshes arrive with the strategies that use them.
//
// Thread-safety: collectives and group management on the loop thread; work
// handles may be waited on from any thread (comm::Work is thread-safe).
#include <cstring>
#include <memory>
#include <vector>

#include "host/comm/process_group.h"
#include "host/runtime/host_context.h"
#include "host/runtime/service_support.h"

// The ABI's opaque handles (accel/comm.h, global namespace).
struct AccelGroup {
  accel::comm::ProcessGroup* group = nullptr;              // not owned
  std::unique_ptr<accel::comm::ProcessGroup> owned;        // groups a plugin or the mesh made
  std::vector<int32_t> ranks;                              // global ranks, group order
};

struct AccelWork {
  std::shared_ptr<accel::comm::Work> work;
};

namespace accel::runtime {
namespace {

using comm::Buffer;
using comm::DType;

comm::ProcessGroup& world_of(HostContext& context) {
  if (!context.world) fail(ACCEL_ERROR_FAILED_PRECONDITION, "no communicator in this host context");
  return *context.world;
}

// A handle owning `group` (NULL for a rank the group does not include).
AccelGroup* new_handle(std::unique_ptr<comm::ProcessGroup> group) {
  if (!group) return nullptr;
  auto* handle = new AccelGroup;
  handle->group = group.get();
  for (int r : group->world_ranks()) handle->ranks.push_back(static_cast<int32_t>(r));
  handle->owned = std::move(group);
  return handle;
}

std::shared_ptr<AccelGroup> wrap(std::unique_ptr<comm::ProcessGroup> group) {
  return std::shared_ptr<AccelGroup>(new_handle(std::move(group)));
}

comm::ProcessGroup& group_of(HostContext& context, AccelGroup* group) {
  return group ? *group->group : world_of(context);
}

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

// Sync: waits and fails with the operation's status. Async: hands out a handle.
void finish(std::shared_ptr<comm::Work> work, AccelWork** out) {
  if (out) {
    *out = new AccelWork{std::move(work)};
    return;
  }
  const comm::Status s = work->wait();
  if (!s.ok()) fail(status_of(s), s.message);
}

comm::OpOptions options_of(const AccelCollectiveArgs* a) {
  comm::OpOptions o;
  o.timeout_ms = a->timeout_ms;
  if (a->label) o.label = a->label;
  return o;
}

// One entry point per collective kind; the shared checks and accounting here.
template <class Body>
AccelStatus collective(const char* name, AccelHost* host, const AccelCollectiveArgs* args, AccelWork** work,
                       Body&& body) {
  return call_service(name, [&] {
    ACCEL_REQUIRE_ARGS(args, AccelCollectiveArgs, label);
    HostContext& context = context_of(host);
    comm::ProcessGroup& group = group_of(context, args->group);
    std::shared_ptr<comm::Work> w = body(group, context);
    finish(std::move(w), work);
  });
}

AccelStatus all_reduce(AccelHost* host, const AccelCollectiveArgs* a, AccelWork** work) {
  return collective("comm.all_reduce", host, a, work, [&](comm::ProcessGroup& g, HostContext& c) {
    const Buffer in = buffer_of(a->input, "input"), out = buffer_of(a->output, "output");
    c.comm_bytes += static_cast<int64_t>(in.bytes());
    return g.all_reduce_async(in, out, op_of(a->op), options_of(a));
  });
}

AccelStatus all_gather(AccelHost* host, const AccelCollectiveArgs* a, AccelWork** work) {
  return collective("comm.all_gather", host, a, work, [&](comm::ProcessGroup& g, HostContext& c) {
    const Buffer in = buffer_of(a->input, "input"), out = buffer_of(a->output, "output");
    c.comm_bytes += static_cast<int64_t>(out.bytes());  // the gathered (full) tensor
    return g.all_gather_async(in, out, options_of(a));
  });
}

AccelStatus reduce_scatter(AccelHost* host, const AccelCollectiveArgs* a, AccelWork** work) {
  return collective("comm.reduce_scatter", host, a, work, [&](comm::ProcessGroup& g, HostContext& c) {
    const Buffer in = buffer_of(a->input, "input"), out = buffer_of(a->output, "output");
    c.comm_bytes += static_cast<int64_t>(in.bytes());
    return g.reduce_scatter_async(in, out, op_of(a->op), options_of(a));
  });
}

AccelStatus broadcast(AccelHost* host, const AccelCollectiveArgs* a, AccelWork** work) {
  return collective("comm.broadcast", host, a, work, [&](comm::ProcessGroup& g, HostContext& c) {
    const Buffer out = buffer_of(a->output, "output");
    c.comm_bytes += static_cast<int64_t>(out.bytes());
    return g.broadcast_async(out, a->peer, options_of(a));
  });
}

AccelStatus all_to_all(AccelHost* host, const AccelCollectiveArgs* a, AccelWork** work) {
  return collective("comm.all_to_all", host, a, work, [&](comm::ProcessGroup& g, HostContext& c) {
    const Buffer in = buffer_of(a->input, "input"), out = buffer_of(a->output, "output");
    c.comm_bytes += static_cast<int64_t>(in.bytes());
    return g.all_to_all_async(in, out, options_of(a));
  });
}

// The send/recv batch open on this thread (batch_begin .. batch_end): its
// operations are issued together, so a pipeline stage may send to and receive
// from its neighbours in any order without deadlock.
struct OpenBatch {
  bool open = false;
  comm::ProcessGroup* group = nullptr;
  std::vector<comm::P2POp> ops;
  std::string label;
};
thread_local OpenBatch t_batch;

// Queues a send or recv in the open batch instead of issuing it.
void queue_p2p(HostContext& context, const AccelCollectiveArgs* a, AccelWork** work, comm::P2POp::Kind kind) {
  if (work) fail(ACCEL_ERROR_INVALID_ARGUMENT, "inside a batch, send/recv take work == NULL (batch_end returns it)");
  comm::ProcessGroup& group = group_of(context, a->group);
  if (t_batch.group && t_batch.group != &group) fail(ACCEL_ERROR_INVALID_ARGUMENT, "a batch spans one group");
  t_batch.group = &group;
  comm::P2POp op;
  op.kind = kind;
  op.buffer = buffer_of(kind == comm::P2POp::Kind::send ? a->input : a->output,
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
    comm::ProcessGroup& g = group_of(context, a->group);
    if (kind == comm::P2POp::Kind::send) {
      const Buffer in = buffer_of(a->input, "input");
      context.comm_bytes += static_cast<int64_t>(in.bytes());
      finish(g.send_async(in, a->peer, 0, options_of(a)), work);
    } else {
      finish(g.recv_async(buffer_of(a->output, "output"), a->peer, 0, options_of(a)), work);
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
  return collective("comm.barrier", host, a, work,
                    [&](comm::ProcessGroup& g, HostContext&) { return g.barrier_async(options_of(a)); });
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
    finish(batch.group->batch_p2p_async(batch.ops, options), work);
  });
}

AccelStatus work_wait(AccelHost*, AccelWork* work, AccelStream) {
  return call_service("comm.work_wait", [&] {
    if (!work) fail(ACCEL_ERROR_INVALID_ARGUMENT, "work is NULL");
    const comm::Status s = work->work->wait();
    if (!s.ok()) fail(status_of(s), s.message);
  });
}

AccelStatus work_synchronize(AccelHost* host, AccelWork* work) { return work_wait(host, work, nullptr); }

AccelStatus work_test(AccelHost*, AccelWork* work, bool* done) {
  return call_service("comm.work_test", [&] {
    if (!work || !done) fail(ACCEL_ERROR_INVALID_ARGUMENT, "work or done is NULL");
    *done = work->work->test();
    if (*done) {
      const comm::Status s = work->work->status();
      if (!s.ok()) fail(status_of(s), s.message);
    }
  });
}

AccelStatus work_free(AccelHost*, AccelWork* work) {
  return call_service("comm.work_free", [&] {
    if (!work) return;
    if (!work->work->finished()) {
      fail(ACCEL_ERROR_FAILED_PRECONDITION, "work freed before wait/test observed its completion");
    }
    delete work;
  });
}

AccelStatus set_mesh(AccelHost* host, const AccelMeshSpec* mesh) {
  return call_service("comm.set_mesh", [&] {
    ACCEL_REQUIRE_ARGS(mesh, AccelMeshSpec, replica_size);
    HostContext& context = context_of(host);
    if (!context.planning) fail(ACCEL_ERROR_FAILED_PRECONDITION, "set_mesh is allowed only inside plan_model");
    auto merge = [&](int32_t& mine, int32_t theirs, const char* what) {
      if (theirs == 0) return;
      if (mine != 0 && mine != theirs) {
        fail(ACCEL_ERROR_INVALID_ARGUMENT, std::string(what) + " size " + std::to_string(theirs) +
                                               " conflicts with " + std::to_string(mine) + " declared before");
      }
      mine = theirs;
    };
    merge(context.mesh.tensor_size, mesh->tensor_size, "tensor");
    merge(context.mesh.pipeline_size, mesh->pipeline_size, "pipeline");
    merge(context.mesh.sharding_size, mesh->sharding_size, "sharding");
    merge(context.mesh.replica_size, mesh->replica_size, "replica");
  });
}

AccelStatus get_group(AccelHost* host, AccelGroupKind kind, AccelGroup** group) {
  return call_service("comm.get_group", [&] {
    if (!group) fail(ACCEL_ERROR_INVALID_ARGUMENT, "group is NULL");
    HostContext& context = context_of(host);
    const auto it = context.standard_groups.find(static_cast<int>(kind));
    if (it == context.standard_groups.end()) {
      fail(ACCEL_ERROR_FAILED_PRECONDITION,
           "standard group " + std::to_string(kind) + " does not exist yet (groups exist from setup on)");
    }
    *group = it->second.get();
  });
}

AccelStatus group_info(AccelHost* host, const AccelGroup* group, AccelGroupInfo* info) {
  return call_service("comm.group_info", [&] {
    ACCEL_REQUIRE_ARGS(info, AccelGroupInfo, ranks);
    HostContext& context = context_of(host);
    comm::ProcessGroup& g = group ? *group->group : world_of(context);
    info->rank = g.rank();
    info->size = g.size();
    info->ranks = group ? group->ranks.data() : context.standard_groups.at(ACCEL_GROUP_WORLD)->ranks.data();
  });
}

AccelStatus create_group(AccelHost* host, const int32_t* ranks, int32_t num_ranks, AccelGroup** group) {
  return call_service("comm.create_group", [&] {
    if (!ranks || num_ranks <= 0 || !group) fail(ACCEL_ERROR_INVALID_ARGUMENT, "empty rank list or NULL group");
    HostContext& context = context_of(host);
    const std::vector<int> list(ranks, ranks + num_ranks);
    std::unique_ptr<comm::ProcessGroup> made = world_of(context).new_group(list, "plugin group");
    *group = new_handle(std::move(made));
  });
}

AccelStatus split_group(AccelHost* host, AccelGroup* parent, int32_t color, int32_t key, AccelGroup** group) {
  return call_service("comm.split_group", [&] {
    if (!group) fail(ACCEL_ERROR_INVALID_ARGUMENT, "group is NULL");
    HostContext& context = context_of(host);
    std::unique_ptr<comm::ProcessGroup> made = group_of(context, parent).split(color, key, "plugin split");
    *group = new_handle(std::move(made));
  });
}

AccelStatus destroy_group(AccelHost* host, AccelGroup* group) {
  return call_service("comm.destroy_group", [&] {
    HostContext& context = context_of(host);
    for (const auto& [kind, standard] : context.standard_groups) {
      if (standard.get() == group) fail(ACCEL_ERROR_INVALID_ARGUMENT, "standard groups belong to the host");
    }
    delete group;
  });
}

}  // namespace

void resolve_standard_groups(HostContext& context) {
  comm::ProcessGroup& world = *context.world;
  AccelMeshSpec& mesh = context.mesh;
  const int world_size = world.size();
  if ((mesh.tensor_size > 1) || (mesh.pipeline_size > 1)) {
    throw std::runtime_error("the plugins' mesh asks for tensor or pipeline parallelism, which this host version "
                             "does not resolve yet");
  }
  mesh.tensor_size = 1;
  mesh.pipeline_size = 1;
  if (mesh.sharding_size == 0 && mesh.replica_size == 0) mesh.sharding_size = 1;
  if (mesh.sharding_size == 0) mesh.sharding_size = world_size / std::max(1, mesh.replica_size);
  if (mesh.replica_size == 0) mesh.replica_size = world_size / std::max(1, mesh.sharding_size);
  if (mesh.sharding_size * mesh.replica_size != world_size) {
    throw std::runtime_error("mesh sharding " + std::to_string(mesh.sharding_size) + " x replica " +
                             std::to_string(mesh.replica_size) + " does not equal the world size " +
                             std::to_string(world_size));
  }
  const int rank = world.rank();
  auto world_handle = std::make_shared<AccelGroup>();
  world_handle->group = &world;
  for (int r : world.world_ranks()) world_handle->ranks.push_back(static_cast<int32_t>(r));
  context.standard_groups[ACCEL_GROUP_WORLD] = world_handle;
  context.standard_groups[ACCEL_GROUP_DATA] = world_handle;  // tensor = pipeline = 1
  // data_index = replica_index * sharding_size + sharding_index (accel/comm.h).
  const int sharding_index = rank % mesh.sharding_size, replica_index = rank / mesh.sharding_size;
  context.standard_groups[ACCEL_GROUP_SHARDING] = wrap(world.split(replica_index, rank, "sharding"));
  context.standard_groups[ACCEL_GROUP_REPLICA] = wrap(world.split(sharding_index, rank, "replica"));
  context.standard_groups[ACCEL_GROUP_TENSOR] = wrap(world.split(rank, 0, "tensor"));
  context.standard_groups[ACCEL_GROUP_PIPELINE] = wrap(world.split(rank, 0, "pipeline"));
  context.standard_groups[ACCEL_GROUP_NODE] = wrap(world.split(context.identity.node_rank, rank, "node"));
}

const AccelCommServices* comm_services_table() {
  static const AccelCommServices table = [] {
    AccelCommServices t{};
    t.struct_size = sizeof(t);
    t.set_mesh = &set_mesh;
    t.get_group = &get_group;
    t.group_info = &group_info;
    t.create_group = &create_group;
    t.split_group = &split_group;
    t.destroy_group = &destroy_group;
    t.all_reduce = &all_reduce;
    t.all_gather = &all_gather;
    t.reduce_scatter = &reduce_scatter;
    t.broadcast = &broadcast;
    t.all_to_all = &all_to_all;
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
