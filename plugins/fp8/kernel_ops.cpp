// kernel_ops.cpp — throwing wrappers of the service calls (see kernel_ops.h).
#include "kernel_ops.h"

#include <accel/sdk/error.hpp>

#include <cstring>

namespace accel::fp8 {

CellView::CellView(const DLTensor& base, int64_t offset, int64_t count) : shape_(count) {
  view_ = base;
  view_.ndim = 1;
  view_.shape = &shape_;
  view_.strides = &stride_;
  view_.byte_offset = base.byte_offset + static_cast<uint64_t>(offset) * ((base.dtype.bits + 7u) / 8u);
}

void KernelOps::cast(const DLTensor* input, const DLTensor* output, const DLTensor* scale, const DLTensor* amax,
                     bool accumulate_amax) const {
  AccelCastArgs args{};
  args.struct_size = sizeof(args);
  args.input = input;
  args.output = output;
  args.scale = scale;
  args.amax = amax;
  args.flags = accumulate_amax ? ACCEL_CAST_AMAX_ACCUMULATE : 0u;
  s_.check(s_.table()->kernels->cast(s_.host(), &args), "fp8 cast");
}

void KernelOps::gemm(const DLTensor* a, const DLTensor* b, const DLTensor* out, const DLTensor* bias,
                     const DLTensor* scale_a, const DLTensor* scale_b, uint32_t flags) const {
  AccelGemmArgs args{};
  args.struct_size = sizeof(args);
  args.a = a;
  args.b = b;
  args.out = out;
  args.bias = bias;
  args.scale_a = scale_a;
  args.scale_b = scale_b;
  args.alpha = 1.0;
  args.flags = flags;
  s_.check(s_.table()->kernels->gemm(s_.host(), &args), "fp8 gemm");
}

void KernelOps::scale_update(const DLTensor* history, const DLTensor* scale, const DLTensor* scale_inv,
                             DLDataType fp8_dtype, int32_t margin, AccelAmaxAlgo algo, bool roll) const {
  AccelFp8ScaleUpdateArgs args{};
  args.struct_size = sizeof(args);
  args.amax_history = history;
  args.scale = scale;
  args.scale_inv = scale_inv;
  args.fp8_dtype = fp8_dtype;
  args.margin = margin;
  args.algo = algo;
  args.flags = roll ? ACCEL_FP8_ROLL_HISTORY : 0u;
  s_.check(s_.table()->kernels->fp8_scale_update(s_.host(), &args), "fp8_scale_update");
}

void KernelOps::fill(const DLTensor* x, double value) const {
  AccelFillArgs args{};
  args.struct_size = sizeof(args);
  args.x = x;
  args.value = value;
  s_.check(s_.table()->kernels->fill(s_.host(), &args), "fill");
}

void KernelOps::scale(const DLTensor* x, double alpha) const {
  AccelScaleArgs args{};
  args.struct_size = sizeof(args);
  args.x = x;
  args.alpha = alpha;
  s_.check(s_.table()->kernels->scale(s_.host(), &args), "scale");
}

void KernelOps::copy(const DLTensor* src, const DLTensor* dst) const {
  AccelCopyArgs args{};
  args.struct_size = sizeof(args);
  args.src = src;
  args.dst = dst;
  s_.check(s_.table()->memory->copy(s_.host(), &args), "copy");
}

void KernelOps::all_reduce(AccelGroup* group, const DLTensor* tensor, AccelReduceOp op, const char* label) const {
  AccelCollectiveArgs args{};
  args.struct_size = sizeof(args);
  args.group = group;
  args.input = tensor;
  args.output = tensor;
  args.op = op;
  args.label = label;
  s_.check(s_.table()->comm->all_reduce(s_.host(), &args, nullptr), label);
}

AccelGroup* KernelOps::group(AccelGroupKind kind) const {
  AccelGroup* g = nullptr;
  s_.check(s_.table()->comm->get_group(s_.host(), kind, &g), "get_group");
  return g;
}

int32_t KernelOps::group_size(AccelGroup* group) const {
  AccelGroupInfo info{};
  info.struct_size = sizeof(info);
  s_.check(s_.table()->comm->group_info(s_.host(), group, &info), "group_info");
  return info.size;
}

sdk::Buffer KernelOps::allocate(AccelMemoryCategory category, DLDataType dtype, std::vector<int64_t> shape,
                                const char* label, AccelMemoryPlace place) const {
  return sdk::Buffer(s_, category, dtype, std::move(shape), place, 0, nullptr, label);
}

std::vector<uint8_t> KernelOps::read_bytes(const DLTensor& t) const {
  const size_t nbytes = accel_tensor_nbytes(&t);
  std::vector<uint8_t> out(nbytes);
  if (sdk::is_host(t)) {
    if (nbytes != 0) std::memcpy(out.data(), accel_tensor_begin(&t), nbytes);
    return out;
  }
  sdk::Buffer staging = allocate(ACCEL_MEMORY_WORKSPACE, t.dtype, {accel_tensor_numel(&t)}, "fp8 readback",
                                 ACCEL_MEMORY_HOST);
  const CellView flat(t, 0, accel_tensor_numel(&t));
  copy(flat.get(), &staging.tensor());
  s_.check(s_.table()->memory->stream_synchronize(s_.host(), nullptr), "synchronize");
  if (nbytes != 0) std::memcpy(out.data(), accel_tensor_begin(&staging.tensor()), nbytes);
  return out;
}

std::vector<float> KernelOps::read_floats(const DLTensor& t) const {
  if (!accel_dtype_equal(t.dtype, kFloat32)) {
    throw sdk::Error(ACCEL_ERROR_INTERNAL, "read_floats: expected float32, got " + sdk::describe(t));
  }
  const std::vector<uint8_t> bytes = read_bytes(t);
  std::vector<float> out(bytes.size() / sizeof(float));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

}  // namespace accel::fp8
