// Process groups: an ordered set of ranks with its own communicators — an
// MPI sub-communicator always, and an NCCL communicator created on the first
// operation on CUDA memory. A ProcessGroup is itself a Communicator that
// sends each operation to the backend owning its memory (host -> MPI, CUDA
// -> NCCL), so callers never choose (the ABI's rule). Groups are values
// handed to whoever uses them: the world group is made from the MpiSession
// by main(), and data, tensor, pipeline, sharding and replica groups are made
// from it (new_group from a rank list, split by color and key); there is no
// global "current group".
//
// Invariants: group rank i is world rank world_ranks()[i]. Creating a group
// is collective over its parent (every parent rank calls it, in the same
// order); a rank outside the new group gets nullptr. Every setup step polls
// against options.timeout_ms, so a rank that never arrives makes the others
// throw CommError(timeout) instead of hanging. The lazily created NCCL
// communicator is collective too: every member's first CUDA operation on
// the group creates it, which holds because all members issue the same
// operations in the same order.
//
// barrier() is a host rendezvous over MPI whatever the memory: it
// synchronises processes (checkpoint commit), not streams.
//
// Thread-safety: as Communicator (one issuing thread per group).
#pragma once

#include <mpi.h>

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "host/comm/communicator.h"
#include "host/comm/mpi_communicator.h"

namespace accel::comm {

class MpiSession;

class ProcessGroup final : public Communicator {
 public:
  // Every rank of MPI_COMM_WORLD (collective over it). With
  // options.backend == nccl, throws CommError unless every rank has a
  // CUDA device. `local_rank` picks the CUDA device (local_rank % devices).
  static std::unique_ptr<ProcessGroup> create_world(MPI_Comm world, int local_rank, CommOptions options,
                                                    std::string name = "world");
  static std::unique_ptr<ProcessGroup> create_world(const MpiSession& session, CommOptions options);

  ~ProcessGroup() override;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  // The ranks listed (ranks of *this* group, no duplicates) in list order.
  // Collective over this group; nullptr on ranks not listed. Throws
  // CommError(invalid_argument) for a bad list (on every rank alike).
  std::unique_ptr<ProcessGroup> new_group(std::span<const int> ranks, const std::string& name);
  // MPI_Comm_split: ranks of equal color form a group, ordered by key then
  // by rank here. color < 0: nullptr. Collective over this group.
  std::unique_ptr<ProcessGroup> split(int color, int key, const std::string& name);

  const std::string& name() const { return name_; }
  const std::vector<int>& world_ranks() const { return world_ranks_; }
  int world_rank() const { return world_ranks_[static_cast<size_t>(rank())]; }
  const CommOptions& options() const { return options_; }

  MpiCommunicator& mpi() { return *mpi_; }
  // The NCCL communicator, created on first call (collective over the
  // group); nullptr with *error set when it cannot exist (backend mpi, no
  // device). A failed creation is remembered and not retried.
  Communicator* nccl(Status* error);
  // The MPI communicator the group owns (its MpiCommunicator uses a private
  // duplicate). For bootstrapping other libraries over the same ranks.
  MPI_Comm mpi_comm() const { return comm_; }

  // ------------------------------------------------- Communicator overrides --
  int rank() const override { return mpi_->rank(); }
  int size() const override { return mpi_->size(); }
  const char* backend() const override { return "group"; }
  // The first failure of either backend.
  std::optional<Status> failure() const override;
  // The MPI backend's recorder (the NCCL one: nccl()->flight_recorder()).
  const FlightRecorder& flight_recorder() const override { return mpi_->flight_recorder(); }

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
  // Takes ownership of `comm` (already with this group's ranks).
  ProcessGroup(MPI_Comm comm, std::string name, std::vector<int> world_ranks, int local_rank,
               CommOptions options);

  // The backend for `buffer`'s memory, or a failed Work explaining why none.
  Communicator* route(const Buffer& buffer, OpType op, std::string_view label, std::shared_ptr<Work>* failed);

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::string name_;
  std::vector<int> world_ranks_;
  int local_rank_ = 0;
  CommOptions options_;
  std::unique_ptr<MpiCommunicator> mpi_;
  std::unique_ptr<Communicator> nccl_;
  Status nccl_error_;  // sticky once creation failed
};

}  // namespace accel::comm
