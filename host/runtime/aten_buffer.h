// A contiguous ATen tensor as the communicator's Buffer: how the host's own
// model collectives (tensor, context and expert parallelism) hand tensors
// to a ProcessGroup, and wait for them. Throws std::runtime_error for a
// dtype the communicators do not move. Any thread.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "host/comm/types.h"
#include "host/comm/work.h"

namespace accel::runtime {

inline comm::DType comm_dtype_of(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return comm::DType::f32;
    case at::kBFloat16: return comm::DType::bf16;
    case at::kHalf: return comm::DType::f16;
    case at::kDouble: return comm::DType::f64;
    case at::kLong: return comm::DType::i64;  // expert parallelism's token counts
    case at::kInt: return comm::DType::i32;
    default:
      throw std::runtime_error(std::string("the host's model collectives cannot move a ") +
                               c10::toString(t.scalar_type()) + " tensor");
  }
}

inline comm::Buffer buffer_of(const at::Tensor& t) {
  return comm::Buffer{t.data_ptr(), t.numel(), comm_dtype_of(t), t.is_cuda(), t.is_cuda() ? t.get_device() : 0};
}

// Completes a model collective in the order its memory needs: on CUDA memory
// by making the compute stream (the default one, which the host's kernels
// run on) wait for it, so the host goes on queuing work and nothing stalls
// it (the watchdog still holds the deadline); on host memory by waiting for
// it. A tensor the operation used may be freed once this returns: the
// caching allocator reuses its block on the compute stream, after the wait.
// Throws std::runtime_error with the failure's line.
inline void complete_in_stream_order(const std::shared_ptr<comm::Work>& work, const comm::Buffer& memory) {
  const comm::Status status = memory.on_cuda ? work->wait_stream(nullptr) : work->wait();
  if (!status.ok()) throw std::runtime_error(status.message);
}

}  // namespace accel::runtime
