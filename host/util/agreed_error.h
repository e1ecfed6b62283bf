// An error every rank raises together, because the ranks agreed on it
// through a collective (a configuration mismatch found by the start-up
// exchange, a non-finite global loss). main() then exits each rank with
// `exit_code` after printing the message once (rank 0), instead of tearing
// the job down with MPI_Abort as it must when only one rank failed.
//
// Thread-safety: a plain exception value.
#pragma once

#include <stdexcept>
#include <string>

namespace accel {

// The exit code of a run whose loss averaged over every rank stayed
// non-finite past --nonfinite-loss-skips: every rank stops together, and
// resuming the same checkpoint would repeat it exactly, so a supervisor
// does not restart it (host/app/supervise.h).
constexpr int kExitDiverged = 3;

// The exit code of a run that failed before its first step on every rank
// (a weight file that is missing, a checkpoint that cannot be resumed, a
// plugin's setup that fails): nothing random went wrong, so running the
// same command again fails the same way, and a supervisor does not restart
// it. A failure once training runs (a rank died, a collective timed out)
// exits 1, which a restart may cure.
constexpr int kExitFailedAtStartup = 4;

struct AgreedError : std::runtime_error {
  AgreedError(int code, const std::string& message, bool logged_on_every_rank = false)
      : std::runtime_error(message), exit_code(code), logged(logged_on_every_rank) {}
  int exit_code;  // 1: run failure, 2: usage error, kExitDiverged
  bool logged;    // every rank already printed its own line: main prints nothing more
};

}  // namespace accel
