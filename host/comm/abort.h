// The one way out of the communication layer that ends the process: when a
// rank detects a timeout or a failed peer, the other ranks may be blocked in
// places no deadline reaches (a kernel, a blocking MPI call of another
// library), so the job is ended as a whole. MPI_Abort makes mpirun kill every
// rank of the job, on every node.
//
// Nothing else in host/comm exits. Thread-safe: may be called from the
// watchdog thread while the loop thread is inside an operation.
#pragma once

#include <string_view>

namespace accel::comm {

// Exit status of a job ended by abort_all (EX_SOFTWARE).
inline constexpr int kAbortExitCode = 70;

// Logs "rank R: ending the job: <reason>" as an error (flushed), then calls
// MPI_Abort(MPI_COMM_WORLD). Without an initialised MPI it _Exits. Never
// returns.
[[noreturn]] void abort_all(std::string_view reason, int exit_code = kAbortExitCode);

}  // namespace accel::comm
