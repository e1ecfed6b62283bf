// The MPI backend's all_reduce for large buffers: a ring of non-blocking
// point-to-point steps — reduce-scatter, then all-gather — driven by Work's
// polling, as NCCL and Open MPI's blocking `tuned` component do it. It exists
// because Open MPI's non-blocking MPI_Iallreduce (libnbc) picks reduce +
// broadcast for groups under 4 ranks and for every in-place call: the data
// then crosses twice, one way at a time, and a 4 MiB all_reduce of 2 ranks
// takes 1.2-2x the blocking call (docs/communication.md, "Benchmarks").
//
// Each of the 2(n-1) steps sends one 1/n chunk to the next rank and receives
// one from the previous, so every rank moves 2(n-1)/n of the buffer — the
// bus-bandwidth optimum. Chunk k is reduced along the ring in a fixed order
// by one rank and then copied to all, so every rank ends with the same bits;
// each local combine is reduce_local, i.e. exactly the MPI operators (fp32
// per combine for the narrow floats), and avg divides each chunk once,
// before it is gathered.
//
// Invariants: the ring's messages travel on a communicator of their own (a
// private duplicate), so they never match a caller's send/recv, and carry a
// tag unique among the rings in flight (collectives are issued in the same
// order everywhere, so every rank computes the same tag). Being
// point-to-point, a timed-out ring is withdrawn cleanly: receives are
// cancelled, sends freed. Thread-safety: as Work.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "host/comm/work.h"

namespace accel::comm {

// Scratch buffers for the rings in flight, reused: faulting in a fresh
// 32 MiB buffer on every call would cost more than the ring saves.
class ScratchPool {
 public:
  // A buffer of at least `bytes` bytes (contents unspecified).
  std::vector<uint8_t> acquire(size_t bytes);
  void release(std::vector<uint8_t> buffer);

 private:
  std::mutex mu_;
  std::vector<std::vector<uint8_t>> free_;
};

struct RingPlan {
  MPI_Comm comm = MPI_COMM_NULL;  // the ring's private communicator
  MPI_Datatype type = MPI_DATATYPE_NULL;
  int tag = 0;
  int rank = 0;
  int size = 1;
  size_t segment_bytes = 1024 * 1024;  // CommOptions::ring_segment_bytes
};

// Starts the ring and returns its Work; a Work whose first step MPI refused is returned already
// failed. Requires plan.size >= 2; output.count may be anything.
std::shared_ptr<Work> start_ring_all_reduce(std::shared_ptr<CommState> state, OpInfo info, int64_t timeout_ms,
                                            const RingPlan& plan, const Buffer& input, const Buffer& output,
                                            ReduceOp op, std::shared_ptr<ScratchPool> pool);

}  // namespace accel::comm
