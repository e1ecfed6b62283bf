// abort_all (see abort.h). stderr is flushed before MPI_Abort because mpirun
// may kill this process before its buffers drain, and the reason is the one
// line the user needs.
#include "host/comm/abort.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "host/util/log.h"

namespace accel::comm {

void abort_all(std::string_view reason, int exit_code) {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  int rank = -1;
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::string line = "rank " + std::to_string(rank) + ": ending the job: " + std::string(reason);
  // Straight to stderr when the logger is configured off: this line must
  // reach the user.
  if (log::enabled(log::Level::error)) {
    log::error(line);
  } else {
    std::fprintf(stderr, "accel: %s\n", line.c_str());
  }
  std::fflush(stderr);
  std::fflush(stdout);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort should not return; be certain.
}

}  // namespace accel::comm
