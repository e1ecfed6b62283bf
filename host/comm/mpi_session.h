// The process's MPI lifetime: MPI_Init at construction, MPI_Finalize at
// destruction, and the identity every other layer asks for (rank, world size,
// node-local rank). Launched without mpirun, Open MPI's singleton mode gives a
// world of one: the embedded default.
//
// Exactly one MpiSession exists per process, owned by main(); it is passed by
// reference, never reached through a global. Not thread-safe to construct.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "host/comm/session_root.h"

namespace accel::comm {

class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_rank_; }
  int local_world_size() const { return local_world_size_; }
  // Nodes are the shared-memory domains MPI reports (MPI_COMM_TYPE_SHARED),
  // numbered 0 .. num_nodes-1 in the order of their lowest world rank.
  int node_rank() const { return (*world_nodes_)[static_cast<size_t>(rank_)]; }
  int num_nodes() const { return num_nodes_; }
  // The node of every world rank (CommOptions::world_nodes).
  const std::shared_ptr<const std::vector<int>>& world_nodes() const { return world_nodes_; }

  // True on every rank when `local_ok` is true on every rank (a collective:
  // all ranks must call it). How ranks agree to stop together.
  bool all_succeeded(bool local_ok) const;

  // Rank 0's `value` on every rank (a collective; at most 4 KiB).
  std::string broadcast_from_root(const std::string& value) const;

  // Whether every rank of the job is ending with a failure of its own:
  // each failing rank calls it (after printing its line) and it returns
  // true once all have, false when `wait_ms` passes first (a rank still
  // runs, waits elsewhere, or died). A non-blocking barrier on a
  // communicator kept for this alone, so it can pair with nothing else and
  // never blocks past the wait. How the same failure on every rank (a
  // damaged file all of them read) ends with each rank's line and a normal
  // exit, instead of MPI_Abort's banner.
  bool every_rank_is_failing(int64_t wait_ms) const;

  // Ends every rank of the job at once: the way out when one rank fails and
  // the others might otherwise wait on it forever. Does not return.
  [[noreturn]] void abort_job(int exit_code) const;

 private:
  MPI_Comm ending_comm_ = MPI_COMM_NULL;  // every_rank_is_failing's own
  int rank_ = 0;
  int world_size_ = 1;
  int local_rank_ = 0;
  int local_world_size_ = 1;
  int num_nodes_ = 1;
  std::shared_ptr<const std::vector<int>> world_nodes_;
  // A singleton's private Open MPI session directory, removed right after
  // MPI_Init (session_root.h); null when Open MPI chose its own.
  std::unique_ptr<SessionRoot> private_session_root_;
};

}  // namespace accel::comm
