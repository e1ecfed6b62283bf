// The MPI backend: host-memory collectives over a private duplicate of an
// MPI communicator. Every operation is a non-blocking MPI call
// (MPI_Iallreduce, MPI_Ireduce_scatter_block, MPI_Isend, ...) whose request
// a Work polls with MPI_Test until it completes or its deadline passes, so no
// call here blocks without a deadline (MPI_Wait could block forever on a
// dead or absent peer). A large all_reduce, all_gather or reduce_scatter
// runs as a ring of non-blocking point-to-point steps instead
// (ring_collectives.h). f16, bf16 and FP8 reduce
// through the operators of mpi_datatypes.h; avg is sum followed by a
// division.
//
// After a timeout MPI gives no way to withdraw a pending collective (freeing
// its request is erroneous), so it is abandoned and the communicator is
// marked failed: its buffers must stay allocated until the process ends,
// which after a timeout is soon (abort_all). Receives are cancelled.
//
// Thread-safety: operations are issued from one thread at a time; MPI must
// be initialised with MPI_THREAD_MULTIPLE (MpiSession does) because Works
// are tested from waiters and from the watchdog thread.
#pragma once

#include <mpi.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "host/comm/communicator.h"
#include "host/comm/mpi_datatypes.h"
#include "host/comm/ring_collectives.h"
#include "host/comm/watchdog.h"

namespace accel::comm {

class MpiCommunicator final : public Communicator {
 public:
  // Duplicates `comm` (collective over it, bounded by options.timeout_ms;
  // throws CommError on failure or timeout). `group_name` and `world_ranks`
  // (world rank of each rank of `comm`; empty when `comm` is the world) only
  // serve messages and the flight recorder.
  MpiCommunicator(MPI_Comm comm, std::string group_name, CommOptions options,
                  std::vector<int> world_ranks = {});
  ~MpiCommunicator() override;

  int rank() const override { return state_->rank(); }
  int size() const override { return state_->size(); }
  const char* backend() const override { return "mpi"; }
  std::optional<Status> failure() const override;
  const FlightRecorder& flight_recorder() const override { return state_->recorder(); }
  // The private duplicate (for benchmarks comparing against raw MPI).
  MPI_Comm comm() const { return comm_; }
  const std::shared_ptr<CommState>& state() const { return state_; }

  std::shared_ptr<Work> all_reduce_async(const Buffer& input, const Buffer& output, ReduceOp op,
                                         const OpOptions& options = {}) override;
  std::shared_ptr<Work> all_gather_async(const Buffer& input, const Buffer& output,
                                         const OpOptions& options = {}) override;
  std::shared_ptr<Work> reduce_scatter_async(const Buffer& input, const Buffer& output, ReduceOp op,
                                             const OpOptions& options = {}) override;
  std::shared_ptr<Work> broadcast_async(const Buffer& buffer, int root,
                                        const OpOptions& options = {}) override;
  std::shared_ptr<Work> all_to_all_async(const Buffer& input, const Buffer& output,
                                         const OpOptions& options = {}) override;
  // Point-to-point on the rings' private communicator with a tag of its
  // own: one receive per peer (zero-length ones too, so a peer that sends
  // what this rank does not expect fails the receive) and one send.
  std::shared_ptr<Work> all_to_all_v_async(const Buffer& input, std::span<const int64_t> send_counts,
                                           const Buffer& output, std::span<const int64_t> recv_counts,
                                           const OpOptions& options = {}) override;
  std::shared_ptr<Work> send_async(const Buffer& input, int peer, int tag,
                                   const OpOptions& options = {}) override;
  std::shared_ptr<Work> recv_async(const Buffer& output, int peer, int tag,
                                   const OpOptions& options = {}) override;
  std::shared_ptr<Work> batch_p2p_async(std::span<const P2POp> ops, const OpOptions& options = {}) override;
  std::shared_ptr<Work> barrier_async(const OpOptions& options = {}) override;

 private:
  class MpiWork;

  // Checks what every operation needs (communicator healthy, host memory,
  // counts that fit MPI's int); returns a failed Work, or nullptr if fine.
  std::shared_ptr<Work> precheck(const OpInfo& info, const Status& validation,
                                 std::initializer_list<const Buffer*> buffers);
  Status check_peer(const char* role, int peer, int tag) const;
  std::shared_ptr<MpiWork> make_work(OpInfo info, const OpOptions& options);
  // Hands a started Work to the watchdog; fails it if `rc` reports an error.
  std::shared_ptr<Work> launched(const std::shared_ptr<MpiWork>& work, int rc);
  OpInfo info(OpType op, const Buffer* buffer, int peer, const OpOptions& options) const;
  // The next ring's plan (takes a tag: call once per ring, in issue order).
  RingPlan ring_plan(DType dtype);
  // Reads the members' nodes from CommOptions::world_nodes and, where the
  // group spans nodes evenly, plans the hierarchy. Throws CommError when a
  // member has no node there.
  void place_on_nodes();
  // The link from this rank to `peer` (a rank of this communicator).
  Link link_to(int peer) const;
  // Whether an all_reduce of `output` runs in three rings (hierarchy_).
  bool all_reduce_is_hierarchical(const Buffer& output) const;
  // Hands a started ring to the watchdog, or marks the communicator failed.
  std::shared_ptr<Work> ring_launched(std::shared_ptr<Work> ring);

  // How the members sit on nodes, where the group spans several with the
  // same number (>= 2) of its ranks on each: the rings of a hierarchical
  // all_reduce (ring_collectives.h), as ranks of this communicator.
  struct Hierarchy {
    std::vector<int> node;    // this rank's node's members, in rank order
    std::vector<int> across;  // one per node, each at this rank's place in its node
    int node_place = 0;       // this rank's place in `node`
    int across_place = 0;     // and in `across`
  };

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm ring_comm_ = MPI_COMM_NULL;  // the rings' own traffic
  std::vector<int> member_nodes_;       // node of each rank (CommOptions::world_nodes)
  std::optional<Hierarchy> hierarchy_;
  uint64_t rings_started_ = 0;          // the same on every rank: ring tags
  std::shared_ptr<ScratchPool> scratch_ = std::make_shared<ScratchPool>();
  int tag_upper_bound_ = 32767;  // MPI_TAG_UB, at least 32767 by the standard
  MpiTypeTable types_;
  std::shared_ptr<CommState> state_;
  std::unique_ptr<Watchdog> watchdog_;
};

// Polls `request` (MPI_Test) until it completes; throws CommError(timeout)
// naming `what` when it has not within timeout_ms, or CommError(internal) on
// an MPI error. For the setup steps that have no Work: duplicating a
// communicator, the NCCL id broadcast, agreeing on a group.
void wait_with_deadline(MPI_Request* request, int64_t timeout_ms, const std::string& what);

// MPI_Comm_idup under wait_with_deadline: a collective over `comm` that
// throws instead of hanging when a rank never arrives.
MPI_Comm duplicate_with_deadline(MPI_Comm comm, int64_t timeout_ms, const std::string& what);

// An MPI error code as text ("MPI_ERR_TRUNCATE: message truncated").
std::string mpi_error_string(int code);

}  // namespace accel::comm
