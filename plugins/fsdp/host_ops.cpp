// host_ops.cpp — the throwing wrappers of the service calls (see host_ops.h).
#include "host_ops.h"

#include <accel/sdk/error.hpp>

#include <string>

namespace accel::fsdp {

namespace {

AccelCollectiveArgs collective_args(AccelGroup* group, const DLTensor* input, const DLTensor* output,
                                    AccelReduceOp op, int32_t peer, const char* label) {
  AccelCollectiveArgs args{};
  args.struct_size = sizeof(args);
  args.group = group;
  args.input = input;
  args.output = output;
  args.op = op;
  args.peer = peer;
  args.label = label;
  return args;
}

}  // namespace

bool same_space(const DLTensor& a, const DLTensor& b) {
  const auto host = [](const DLTensor& t) {
    return t.device.device_type == kDLCPU || t.device.device_type == kDLCUDAHost;
  };
  if (host(a) || host(b)) return host(a) && host(b);
  return a.device.device_type == b.device.device_type && a.device.device_id == b.device.device_id;
}

// --------------------------------------------------------------------- comm

AccelGroup* HostOps::group(AccelGroupKind kind) const {
  AccelGroup* g = nullptr;
  s_.check(s_.table()->comm->get_group(s_.host(), kind, &g), "get_group");
  return g;
}

GroupShape HostOps::shape(AccelGroup* group) const {
  AccelGroupInfo info{};
  info.struct_size = sizeof(info);
  s_.check(s_.table()->comm->group_info(s_.host(), group, &info), "group_info");
  return GroupShape{info.rank, info.size};
}

AccelWork* HostOps::all_gather(AccelGroup* group, const DLTensor* input, const DLTensor* output, const char* label,
                               bool async) const {
  const AccelCollectiveArgs args = collective_args(group, input, output, ACCEL_REDUCE_SUM, 0, label);
  AccelWork* work = nullptr;
  s_.check(s_.table()->comm->all_gather(s_.host(), &args, async ? &work : nullptr), label);
  return work;
}

AccelWork* HostOps::reduce_scatter(AccelGroup* group, const DLTensor* input, const DLTensor* output,
                                   AccelReduceOp op, const char* label, bool async) const {
  const AccelCollectiveArgs args = collective_args(group, input, output, op, 0, label);
  AccelWork* work = nullptr;
  s_.check(s_.table()->comm->reduce_scatter(s_.host(), &args, async ? &work : nullptr), label);
  return work;
}

AccelWork* HostOps::all_reduce(AccelGroup* group, const DLTensor* tensor, AccelReduceOp op, const char* label,
                               bool async) const {
  const AccelCollectiveArgs args = collective_args(group, tensor, tensor, op, 0, label);
  AccelWork* work = nullptr;
  s_.check(s_.table()->comm->all_reduce(s_.host(), &args, async ? &work : nullptr), label);
  return work;
}

void HostOps::broadcast(AccelGroup* group, const DLTensor* tensor, int32_t root, const char* label) const {
  const AccelCollectiveArgs args = collective_args(group, tensor, tensor, ACCEL_REDUCE_SUM, root, label);
  s_.check(s_.table()->comm->broadcast(s_.host(), &args, nullptr), label);
}

void HostOps::wait_and_free(AccelWork* work) const {
  if (work == nullptr) return;
  const AccelCommServices& comm = *s_.table()->comm;
  s_.check(comm.work_wait(s_.host(), work, nullptr), "work_wait");
  s_.check(comm.work_free(s_.host(), work), "work_free");
}

// ------------------------------------------------------------------- memory

sdk::Buffer HostOps::allocate(AccelMemoryCategory category, DLDataType dtype, int64_t numel, AccelMemoryPlace place,
                              bool zero, const char* label) const {
  return sdk::Buffer(s_, category, dtype, {numel}, place, zero ? ACCEL_ALLOCATE_ZERO_FILL : 0u, nullptr, label);
}

void HostOps::copy(const DLTensor* src, const DLTensor* dst) const {
  AccelCopyArgs args{};
  args.struct_size = sizeof(args);
  args.src = src;
  args.dst = dst;
  s_.check(s_.table()->memory->copy(s_.host(), &args), "copy");
}

void HostOps::synchronize() const {
  s_.check(s_.table()->memory->stream_synchronize(s_.host(), nullptr), "stream_synchronize");
}

// ------------------------------------------------------------------ kernels

void HostOps::convert(const DLTensor* src, const DLTensor* dst) const {
  if (accel_dtype_equal(src->dtype, dst->dtype)) {
    copy(src, dst);
    return;
  }
  AccelCastArgs args{};
  args.struct_size = sizeof(args);
  args.input = src;
  args.output = dst;
  s_.check(s_.table()->kernels->cast(s_.host(), &args), "cast");
}

void HostOps::axpy(const DLTensor* x, const DLTensor* y, double alpha) const {
  AccelAxpyArgs args{};
  args.struct_size = sizeof(args);
  args.x = x;
  args.y = y;
  args.alpha = alpha;
  s_.check(s_.table()->kernels->axpy(s_.host(), &args), "axpy");
}

void HostOps::fill(const DLTensor* x, double value) const {
  AccelFillArgs args{};
  args.struct_size = sizeof(args);
  args.x = x;
  args.value = value;
  s_.check(s_.table()->kernels->fill(s_.host(), &args), "fill");
}

// -------------------------------------------------------------------- model

HostOps::Materialized HostOps::materialize(int32_t unit, uint32_t what, AccelStorageInit init,
                                           DLDataType dtype) const {
  AccelMaterializeArgs args{};
  args.struct_size = sizeof(args);
  args.unit = unit;
  args.what = what;
  args.init = init;
  args.param_dtype = dtype;
  args.grad_dtype = dtype;  // autograd accumulates into the parameters' .grad: same dtype
  s_.check(s_.table()->model->materialize(s_.host(), &args), sdk::format("materialize unit %d", unit));
  return Materialized{args.params, args.grads};
}

void HostOps::release(int32_t unit, uint32_t what) const {
  s_.check(s_.table()->model->release(s_.host(), unit, what, nullptr), sdk::format("release unit %d", unit));
}

HostOps::Materialized HostOps::storage(int32_t unit) const {
  Materialized m;
  s_.check(s_.table()->model->get_storage(s_.host(), unit, &m.params, &m.grads),
           sdk::format("get_storage unit %d", unit));
  return m;
}

bool HostOps::init_range(int32_t unit, int64_t begin, const DLTensor* out) const {
  const AccelModelServices* model = s_.table()->model;
  if (!sdk::has_fn(model, &AccelModelServices::init_range)) return false;
  s_.check(model->init_range(s_.host(), unit, begin, out), sdk::format("init_range unit %d", unit));
  return true;
}

}  // namespace accel::fsdp
