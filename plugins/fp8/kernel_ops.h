// kernel_ops.h — the service calls fp8 makes, as throwing C++ functions:
// casts, GEMMs, the delayed-scaling update, collectives, allocation and
// copies, so no other file fills an args struct or checks a status by hand.
//
// Every function throws accel::sdk::Error on failure (the service's message
// is pending in the host; the operation is the context). Everything is
// enqueued on the compute stream (NULL): synchronous on CPU ranks, ordered
// like any kernel on CUDA ranks. Thread-safety: loop thread only.
#pragma once

#include <accel/sdk/tensor.hpp>

#include <cstdint>
#include <vector>

namespace accel::fp8 {

// A 1-D view of `count` elements of a contiguous tensor starting at
// `offset` (one history cell, one row). Owns its shape; valid while the
// base tensor's memory is.
class CellView {
 public:
  CellView(const DLTensor& base, int64_t offset, int64_t count);
  CellView(const CellView&) = delete;
  CellView& operator=(const CellView&) = delete;
  const DLTensor* get() const noexcept { return &view_; }

 private:
  int64_t shape_;
  int64_t stride_ = 1;
  DLTensor view_{};
};

class KernelOps {
 public:
  explicit KernelOps(const sdk::Services& services) : s_(services) {}
  const sdk::Services& services() const { return s_; }

  // out = saturate(input * scale) in out's dtype; amax (optional) = max |input|,
  // accumulated into its old value with `accumulate_amax`.
  void cast(const DLTensor* input, const DLTensor* output, const DLTensor* scale, const DLTensor* amax,
            bool accumulate_amax) const;
  // out (+)= (scale_a op(a)) (scale_b op(b)) + bias, fp32 accumulation.
  void gemm(const DLTensor* a, const DLTensor* b, const DLTensor* out, const DLTensor* bias, const DLTensor* scale_a,
            const DLTensor* scale_b, uint32_t flags) const;
  void scale_update(const DLTensor* history, const DLTensor* scale, const DLTensor* scale_inv, DLDataType fp8_dtype,
                    int32_t margin, AccelAmaxAlgo algo, bool roll) const;
  void fill(const DLTensor* x, double value) const;
  void scale(const DLTensor* x, double alpha) const;  // x *= alpha
  void copy(const DLTensor* src, const DLTensor* dst) const;
  void all_reduce(AccelGroup* group, const DLTensor* tensor, AccelReduceOp op, const char* label) const;
  AccelGroup* group(AccelGroupKind kind) const;
  int32_t group_size(AccelGroup* group) const;

  // A buffer of `shape` in `dtype` on the rank's device (host on CPU runs).
  sdk::Buffer allocate(AccelMemoryCategory category, DLDataType dtype, std::vector<int64_t> shape,
                       const char* label, AccelMemoryPlace place = ACCEL_MEMORY_DEVICE) const;
  // The fp32 values of a contiguous tensor, wherever it lives (a device
  // tensor is copied to the host and the stream synchronised).
  std::vector<float> read_floats(const DLTensor& t) const;
  // The raw bytes of a contiguous tensor, wherever it lives (likewise).
  std::vector<uint8_t> read_bytes(const DLTensor& t) const;

 private:
  sdk::Services s_;
};

inline constexpr DLDataType kFloat32{kDLFloat, 32, 1};

}  // namespace accel::fp8
