// host_ops.h — the service calls fsdp makes, as throwing C++ functions: the
// collectives, copies, kernels and unit storage calls every other file uses,
// so none of them fills an args struct or checks a status by hand.
//
// Every function throws accel::sdk::Error on failure, with the service's
// message pending in the host and the operation as context. Work handles
// returned by the asynchronous collectives are the caller's; wait_and_free
// completes one. Everything is enqueued on the compute stream (NULL): on CPU
// ranks that is synchronous, on CUDA ranks it orders the work like kernels.
// Thread-safety: loop thread only (the collectives and model services are).
#pragma once

#include <accel/sdk/tensor.hpp>

#include <cstdint>

namespace accel::fsdp {

struct GroupShape {
  int32_t rank = 0;
  int32_t size = 1;
};

class HostOps {
 public:
  explicit HostOps(const sdk::Services& services) : s_(services) {}

  const sdk::Services& services() const { return s_; }

  // ---------------------------------------------------------------- comm
  AccelGroup* group(AccelGroupKind kind) const;
  GroupShape shape(AccelGroup* group) const;
  // `async`: returns the work handle (the caller waits); else completes
  // before returning and returns NULL.
  AccelWork* all_gather(AccelGroup* group, const DLTensor* input, const DLTensor* output, const char* label,
                        bool async = false) const;
  AccelWork* reduce_scatter(AccelGroup* group, const DLTensor* input, const DLTensor* output, AccelReduceOp op,
                            const char* label, bool async = false) const;
  AccelWork* all_reduce(AccelGroup* group, const DLTensor* tensor, AccelReduceOp op, const char* label,
                        bool async = false) const;
  void broadcast(AccelGroup* group, const DLTensor* tensor, int32_t root, const char* label) const;
  void wait_and_free(AccelWork* work) const;

  // -------------------------------------------------------------- memory
  // A flat buffer of `numel` elements; zero-filled when `zero`.
  sdk::Buffer allocate(AccelMemoryCategory category, DLDataType dtype, int64_t numel, AccelMemoryPlace place,
                       bool zero, const char* label) const;
  void copy(const DLTensor* src, const DLTensor* dst) const;
  // Blocks until the compute stream's work is done (before the CPU reads
  // what a device-to-host copy wrote); returns at once on CPU ranks.
  void synchronize() const;

  // ------------------------------------------------------------- kernels
  // dst = src, converting the dtype (cast) or not (copy) as needed; places
  // may differ only when the dtypes agree.
  void convert(const DLTensor* src, const DLTensor* dst) const;
  void axpy(const DLTensor* x, const DLTensor* y, double alpha) const;
  void fill(const DLTensor* x, double value) const;

  // --------------------------------------------------------------- model
  struct Materialized {
    const DLTensor* params = nullptr;
    const DLTensor* grads = nullptr;
  };
  Materialized materialize(int32_t unit, uint32_t what, AccelStorageInit init, DLDataType dtype) const;
  void release(int32_t unit, uint32_t what) const;
  Materialized storage(int32_t unit) const;
  // Fills `out` with the initial values of elements [begin, begin + numel)
  // of `unit`'s flat parameters (model->init_range, ABI 1.1). False, with
  // nothing done, on a 1.0 host that lacks it.
  bool init_range(int32_t unit, int64_t begin, const DLTensor* out) const;

 private:
  sdk::Services s_;
};

// Whether two views are in the same memory space (both host memory, or the
// same device), so a kernel may take both.
bool same_space(const DLTensor& a, const DLTensor& b);

}  // namespace accel::fsdp
