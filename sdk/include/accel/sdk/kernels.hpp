// accel/sdk/kernels.hpp — the host's compute, memory, collective and unit
// storage services as typed, throwing C++ calls: the one place a plugin's
// args structs are filled and statuses checked, so a strategy plugin's other
// files read as what they do (fsdp, deepspeed_zero and fp8 all call these).
//
// Every call throws accel::sdk::Error on failure, with the service's message
// pending in the host and the operation (or the caller's label) as context.
// Work handles returned by the asynchronous collectives are the caller's;
// wait_and_free completes one. Everything is enqueued on the compute stream
// (NULL): synchronous on CPU ranks, ordered like any kernel on CUDA ranks.
// Kernels is a value (it holds a Services); copy it freely. Thread-safety:
// the loop thread only, as the collectives and model services are.
#pragma once

#include <accel/accel.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "accel/sdk/error.hpp"
#include "accel/sdk/services.hpp"
#include "accel/sdk/tensor.hpp"

namespace accel::sdk {

struct GroupShape {
  int32_t rank = 0;
  int32_t size = 1;
};

// Whether two views are in the same memory space (both host memory, or the
// same device), so that one kernel may take both.
inline bool same_space(const DLTensor& a, const DLTensor& b) {
  if (is_host(a) || is_host(b)) return is_host(a) && is_host(b);
  return a.device.device_type == b.device.device_type && a.device.device_id == b.device.device_id;
}

class Kernels {
 public:
  explicit Kernels(const Services& services) : s_(services) {}

  const Services& services() const { return s_; }

  // ---------------------------------------------------------------- comm
  AccelGroup* group(AccelGroupKind kind) const {
    AccelGroup* g = nullptr;
    s_.check(s_.table()->comm->get_group(s_.host(), kind, &g), "get_group");
    return g;
  }
  GroupShape shape(AccelGroup* group) const {
    AccelGroupInfo info{};
    info.struct_size = sizeof(info);
    s_.check(s_.table()->comm->group_info(s_.host(), group, &info), "group_info");
    return GroupShape{info.rank, info.size};
  }
  // `async`: returns the work handle (the caller waits); else completes
  // before returning and returns NULL.
  AccelWork* all_gather(AccelGroup* group, const DLTensor* input, const DLTensor* output, const char* label,
                        bool async = false) const {
    return collective(s_.table()->comm->all_gather, group, input, output, ACCEL_REDUCE_SUM, 0, label, async);
  }
  AccelWork* reduce_scatter(AccelGroup* group, const DLTensor* input, const DLTensor* output, AccelReduceOp op,
                            const char* label, bool async = false) const {
    return collective(s_.table()->comm->reduce_scatter, group, input, output, op, 0, label, async);
  }
  AccelWork* all_reduce(AccelGroup* group, const DLTensor* tensor, AccelReduceOp op, const char* label,
                        bool async = false) const {
    return collective(s_.table()->comm->all_reduce, group, tensor, tensor, op, 0, label, async);
  }
  void broadcast(AccelGroup* group, const DLTensor* tensor, int32_t root, const char* label) const {
    collective(s_.table()->comm->broadcast, group, tensor, tensor, ACCEL_REDUCE_SUM, root, label, false);
  }
  // All-to-all with a count per group rank (accel/comm.h's all_to_all_v;
  // host ABI >= 1.11). `async`: returns the work handle, else completes
  // before returning.
  AccelWork* all_to_all_v(AccelGroup* group, const DLTensor* input, const int64_t* send_counts,
                          const DLTensor* output, const int64_t* recv_counts, const char* label,
                          bool async = false) const {
    AccelCollectiveArgs args{};
    args.struct_size = sizeof(args);
    args.group = group;
    args.input = input;
    args.output = output;
    args.label = label;
    AccelWork* work = nullptr;
    s_.check(s_.table()->comm->all_to_all_v(s_.host(), &args, send_counts, recv_counts, async ? &work : nullptr),
             "all_to_all_v");
    return work;
  }
  // Point to point with group rank `peer` (a pipeline's stages). `async`:
  // returns the work handle, else completes before returning.
  AccelWork* send(AccelGroup* group, const DLTensor* input, int32_t peer, const char* label, bool async = false) const {
    return collective(s_.table()->comm->send, group, input, nullptr, ACCEL_REDUCE_SUM, peer, label, async);
  }
  AccelWork* recv(AccelGroup* group, const DLTensor* output, int32_t peer, const char* label, bool async = false) const {
    return collective(s_.table()->comm->recv, group, nullptr, output, ACCEL_REDUCE_SUM, peer, label, async);
  }
  // A new group of `parent`'s ranks of equal `color` (negative: none, NULL),
  // ordered by `key`; the caller destroys it (destroy_group).
  AccelGroup* split_group(AccelGroup* parent, int32_t color, int32_t key) const {
    AccelGroup* g = nullptr;
    s_.check(s_.table()->comm->split_group(s_.host(), parent, color, key, &g), "split_group");
    return g;
  }
  void destroy_group(AccelGroup* group) const {
    if (group != nullptr) s_.check(s_.table()->comm->destroy_group(s_.host(), group), "destroy_group");
  }
  // Whether `work` completed (never blocks); a failed operation throws.
  bool test(AccelWork* work) const {
    bool done = false;
    s_.check(s_.table()->comm->work_test(s_.host(), work, &done), "work_test");
    return done;
  }
  void free_work(AccelWork* work) const { s_.check(s_.table()->comm->work_free(s_.host(), work), "work_free"); }
  void wait_and_free(AccelWork* work) const {
    if (work == nullptr) return;
    const AccelCommServices& comm = *s_.table()->comm;
    s_.check(comm.work_wait(s_.host(), work, nullptr), "work_wait");
    s_.check(comm.work_free(s_.host(), work), "work_free");
  }

  // -------------------------------------------------------------- memory
  // A flat buffer of `numel` elements, or one of `shape`, in `dtype`;
  // zero-filled when `zero`.
  Buffer allocate(AccelMemoryCategory category, DLDataType dtype, int64_t numel, AccelMemoryPlace place, bool zero,
                  const char* label) const {
    return allocate(category, dtype, std::vector<int64_t>{numel}, place, zero, label);
  }
  Buffer allocate(AccelMemoryCategory category, DLDataType dtype, std::vector<int64_t> shape, AccelMemoryPlace place,
                  bool zero, const char* label) const {
    return Buffer(s_, category, dtype, std::move(shape), place, zero ? ACCEL_ALLOCATE_ZERO_FILL : 0u, nullptr, label);
  }
  // `flags`: ACCEL_COPY_* bits (accel/memory.h), 0 for a copy complete on return.
  void copy(const DLTensor* src, const DLTensor* dst, uint32_t flags = 0) const {
    AccelCopyArgs args{};
    args.struct_size = sizeof(args);
    args.src = src;
    args.dst = dst;
    args.flags = flags;
    s_.check(s_.table()->memory->copy(s_.host(), &args), "copy");
  }
  // Blocks until the compute stream's work is done (before the CPU reads
  // what a device-to-host copy wrote); returns at once on CPU ranks.
  void synchronize() const {
    s_.check(s_.table()->memory->stream_synchronize(s_.host(), nullptr), "stream_synchronize");
  }
  // The raw bytes of a contiguous tensor, wherever it lives (a device
  // tensor is staged through host memory and the stream synchronised).
  std::vector<uint8_t> read_bytes(const DLTensor& t) const {
    const size_t nbytes = accel_tensor_nbytes(&t);
    std::vector<uint8_t> out(nbytes);
    if (is_host(t)) {
      if (nbytes != 0) std::memcpy(out.data(), accel_tensor_begin(&t), nbytes);
      return out;
    }
    const int64_t numel = accel_tensor_numel(&t);
    Buffer staging = allocate(ACCEL_MEMORY_WORKSPACE, t.dtype, {numel}, ACCEL_MEMORY_HOST, false, "readback");
    const FlatView flat(t, 0, numel);
    copy(flat.get(), &staging.tensor());
    synchronize();
    if (nbytes != 0) std::memcpy(out.data(), accel_tensor_begin(&staging.tensor()), nbytes);
    return out;
  }
  // The values of a contiguous fp32 tensor, wherever it lives.
  std::vector<float> read_floats(const DLTensor& t) const {
    if (!accel_dtype_equal(t.dtype, DLDataType{kDLFloat, 32, 1})) {
      throw Error(ACCEL_ERROR_INTERNAL, "read_floats: expected float32, got " + describe(t));
    }
    const std::vector<uint8_t> bytes = read_bytes(t);
    std::vector<float> out(bytes.size() / sizeof(float));
    if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
  }

  // ------------------------------------------------------------- kernels
  // dst = src, converting the dtype (cast) or not (copy) as needed; places
  // may differ only when the dtypes agree.
  void convert(const DLTensor* src, const DLTensor* dst) const {
    if (accel_dtype_equal(src->dtype, dst->dtype)) {
      copy(src, dst);
      return;
    }
    cast(src, dst, nullptr, nullptr, false);
  }
  // out = saturate(input * scale) in out's dtype (scale optional); amax
  // (optional) = max |input|, accumulated into its old value when
  // `accumulate_amax`.
  void cast(const DLTensor* input, const DLTensor* output, const DLTensor* scale, const DLTensor* amax,
            bool accumulate_amax) const {
    cast_transposed(input, output, nullptr, scale, amax, accumulate_amax);
  }
  // The cast of a 2-D `input` [rows, cols] that also stores the codes
  // transposed into `transposed` ([cols, rows], contiguous; NULL: the plain
  // cast): one pass on a 1.9 host (AccelCastArgs.output_transposed); on an
  // older host, the cast and then a copy of the output's transposed view.
  void cast_transposed(const DLTensor* input, const DLTensor* output, const DLTensor* transposed,
                       const DLTensor* scale, const DLTensor* amax, bool accumulate_amax) const {
    const bool host_transposes = !(host_abi_version().major == 1 && !host_abi_at_least(1, 9));
    AccelCastArgs args{};
    args.struct_size = sizeof(args);
    args.input = input;
    args.output = output;
    args.output_transposed = host_transposes ? transposed : nullptr;
    args.scale = scale;
    args.amax = amax;
    args.flags = accumulate_amax ? ACCEL_CAST_AMAX_ACCUMULATE : 0u;
    s_.check(s_.table()->kernels->cast(s_.host(), &args), "cast");
    if (transposed != nullptr && !host_transposes) {
      const TransposedView flipped(*output);
      copy(flipped.get(), transposed);
    }
  }
  void axpy(const DLTensor* x, const DLTensor* y, double alpha) const {  // y += alpha x
    AccelAxpyArgs args{};
    args.struct_size = sizeof(args);
    args.x = x;
    args.y = y;
    args.alpha = alpha;
    s_.check(s_.table()->kernels->axpy(s_.host(), &args), "axpy");
  }
  void scale(const DLTensor* x, double alpha) const {  // x *= alpha
    AccelScaleArgs args{};
    args.struct_size = sizeof(args);
    args.x = x;
    args.alpha = alpha;
    s_.check(s_.table()->kernels->scale(s_.host(), &args), "scale");
  }
  void fill(const DLTensor* x, double value) const {
    AccelFillArgs args{};
    args.struct_size = sizeof(args);
    args.x = x;
    args.value = value;
    s_.check(s_.table()->kernels->fill(s_.host(), &args), "fill");
  }
  // out (+)= (scale_a op(a)) (scale_b op(b)) + bias, fp32 accumulation.
  void gemm(const DLTensor* a, const DLTensor* b, const DLTensor* out, const DLTensor* bias, const DLTensor* scale_a,
            const DLTensor* scale_b, uint32_t flags) const {
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
    s_.check(s_.table()->kernels->gemm(s_.host(), &args), "gemm");
  }
  void fp8_scale_update(const DLTensor* history, const DLTensor* scale, const DLTensor* scale_inv, DLDataType fp8_dtype,
                        int32_t margin, AccelAmaxAlgo algo, bool roll) const {
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

  // --------------------------------------------------------------- model
  struct Materialized {
    const DLTensor* params = nullptr;
    const DLTensor* grads = nullptr;
  };
  // Materialises `what` of a unit whose storage this plugin took over;
  // parameters and gradients in `dtype` (autograd accumulates into the
  // parameters' .grad: the same dtype).
  Materialized materialize(int32_t unit, uint32_t what, AccelStorageInit init, DLDataType dtype) const {
    AccelMaterializeArgs args{};
    args.struct_size = sizeof(args);
    args.unit = unit;
    args.what = what;
    args.init = init;
    args.param_dtype = dtype;
    args.grad_dtype = dtype;
    s_.check(s_.table()->model->materialize(s_.host(), &args), format("materialize unit %d", unit));
    return Materialized{args.params, args.grads};
  }
  void release(int32_t unit, uint32_t what) const {
    s_.check(s_.table()->model->release(s_.host(), unit, what, nullptr), format("release unit %d", unit));
  }
  Materialized storage(int32_t unit) const {
    Materialized m;
    s_.check(s_.table()->model->get_storage(s_.host(), unit, &m.params, &m.grads), format("get_storage unit %d", unit));
    return m;
  }
  // Fills `out` with the initial values of elements [begin, begin + numel)
  // of `unit`'s flat parameters (model->init_range, ABI 1.1). False, with
  // nothing done, on a 1.0 host that lacks it.
  bool init_range(int32_t unit, int64_t begin, const DLTensor* out) const {
    const AccelModelServices* model = s_.table()->model;
    if (!has_fn(model, &AccelModelServices::init_range)) return false;
    s_.check(model->init_range(s_.host(), unit, begin, out), format("init_range unit %d", unit));
    return true;
  }

 private:
  AccelWork* collective(AccelCollectiveFn* fn, AccelGroup* group, const DLTensor* input, const DLTensor* output,
                        AccelReduceOp op, int32_t peer, const char* label, bool async) const {
    AccelCollectiveArgs args{};
    args.struct_size = sizeof(args);
    args.group = group;
    args.input = input;
    args.output = output;
    args.op = op;
    args.peer = peer;
    args.label = label;
    AccelWork* work = nullptr;
    s_.check(fn(s_.host(), &args, async ? &work : nullptr), label != nullptr ? label : "collective");
    return work;
  }

  Services s_;
};

}  // namespace accel::sdk
