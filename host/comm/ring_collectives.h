// The MPI backend's large collectives: rings of non-blocking point-to-point
// steps driven by Work's polling, as NCCL and Open MPI's blocking `tuned`
// component run them. An all_reduce is a reduce-scatter phase then an
// all-gather phase; a reduce_scatter is the first phase alone, an all_gather
// the second. They exist because Open MPI's non-blocking collectives
// (libnbc) pick worse algorithms: MPI_Iallreduce reduces to a root and
// broadcasts back for groups under 4 ranks and for every in-place call (a
// 4 MiB all_reduce of 2 ranks took 1.2-2x the blocking call), and
// MPI_Ireduce_scatter_block / MPI_Iallgather ran up to 1.5-1.7x the blocking
// calls at some sizes (docs/communication.md, "Benchmarks").
//
// Each of a phase's n-1 steps sends one 1/n chunk to the next rank and
// receives one from the previous, so every rank moves (n-1)/n of the buffer
// per phase — the bus-bandwidth optimum. Chunk k is reduced along the ring
// in a fixed order by one rank and then copied to all, so every rank ends
// with the same bits; each local combine is reduce_local, i.e. exactly the
// MPI operators (fp32 per combine for the narrow floats), and avg divides
// each chunk once, when its reduction is complete.
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

#include "host/comm/link_bytes.h"
#include "host/comm/work.h"

namespace accel::comm {

// Scratch buffers for the rings in flight, reused: faulting in a fresh
// 32 MiB buffer on every call would cost more than the ring saves. Idle
// buffers are bounded, in number and in bytes: a reduce-scatter's scratch
// is three chunks at more than 2 ranks (118 MiB for gpt-small's embedding
// group on 4 ranks), and keeping the largest ones for the whole run held
// 136 MiB per rank that no model state needed (docs/benchmarks.md, the
// deepspeed_zero tables). A buffer that does not fit is freed on release.
// Thread-safety: any thread.
class ScratchPool {
 public:
  static constexpr size_t kMaxIdleBuffers = 4;
  static constexpr size_t kMaxIdleBytes = size_t{64} << 20;

  ScratchPool() = default;
  ScratchPool(const ScratchPool&) = delete;
  ScratchPool& operator=(const ScratchPool&) = delete;
  ~ScratchPool();

  // A buffer of at least `bytes` bytes (contents unspecified): the smallest
  // idle one that fits, else a new one.
  std::vector<uint8_t> acquire(size_t bytes);
  void release(std::vector<uint8_t> buffer);
  size_t idle_bytes();

 private:
  std::mutex mu_;
  std::vector<std::vector<uint8_t>> free_;
  size_t idle_bytes_ = 0;  // sum of free_'s sizes
};

// What every ScratchPool of the process holds, in use by a ring or idle:
// the memory ledger reports it as communication buffers. Any thread.
int64_t comm_scratch_bytes();

struct RingPlan {
  MPI_Comm comm = MPI_COMM_NULL;  // the ring's private communicator
  MPI_Datatype type = MPI_DATATYPE_NULL;
  int tag = 0;
  int rank = 0;  // this rank's place in the ring
  int size = 1;  // the ring's length
  // The ring's members in ring order, as ranks of `comm`; empty: 0 .. size-1.
  std::vector<int> members;
  // What the link to the next member is, for link_bytes.h's counters.
  Link next_link = Link::intra_node;
  size_t segment_bytes = 1024 * 1024;  // CommOptions::ring_segment_bytes
  int receive_window = 4;              // CommOptions::ring_receive_window_segments
};

// Each starts its ring and returns the Work; a Work whose first step MPI
// refused is returned already failed. All require plan.size >= 2 and
// buffers that validate::<op> accepted.

// output.count may be anything; input may be output (in place).
std::shared_ptr<Work> start_ring_all_reduce(std::shared_ptr<CommState> state, OpInfo info, int64_t timeout_ms,
                                            const RingPlan& plan, const Buffer& input, const Buffer& output,
                                            ReduceOp op, std::shared_ptr<ScratchPool> pool);

// Rank r receives the reduction of chunk r of every rank's input (n chunks
// of output.count). In place, output is chunk r of the input itself: the
// ring reads that chunk only in its last step, which combines each received
// segment with it into the same elements (reduce_local allows out == own).
// Otherwise input must not overlap output.
std::shared_ptr<Work> start_ring_reduce_scatter(std::shared_ptr<CommState> state, OpInfo info,
                                                int64_t timeout_ms, const RingPlan& plan, const Buffer& input,
                                                const Buffer& output, ReduceOp op,
                                                std::shared_ptr<ScratchPool> pool);

// An all_reduce in three rings (CommOptions::hierarchical_all_reduce):
// `node` is this rank's node (l ranks), `across` the ranks of the other
// nodes with the same place in theirs (m ranks, one per node). The node ring
// reduce-scatters the buffer into l chunks, so this rank holds its node's sum
// of one chunk; the ranks holding that chunk on every node all-reduce it
// across nodes; the node ring all-gathers the chunks. Each element is still
// reduced in a fixed order by one rank and copied to all, so every rank ends
// with the same bits; avg divides once, by l x m. Requires l, m >= 2 and
// output.count >= l x m; input may be output (in place).
std::shared_ptr<Work> start_hierarchical_all_reduce(std::shared_ptr<CommState> state, OpInfo info,
                                                    int64_t timeout_ms, const RingPlan& node,
                                                    const RingPlan& across, const Buffer& input,
                                                    const Buffer& output, ReduceOp op,
                                                    std::shared_ptr<ScratchPool> pool);

// Whether an all_gather of `output_bytes` over `group_size` ranks runs on
// the ring rather than MPI_Iallgather, by options' ring_all_gather_* window.
bool all_gather_uses_ring(const CommOptions& options, int group_size, size_t output_bytes);

// Chunk r of the output receives rank r's input. input may already be that
// chunk (in place); otherwise it is copied there before the first step.
std::shared_ptr<Work> start_ring_all_gather(std::shared_ptr<CommState> state, OpInfo info, int64_t timeout_ms,
                                            const RingPlan& plan, const Buffer& input, const Buffer& output);

}  // namespace accel::comm
