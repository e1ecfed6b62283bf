// `accel-host launch --max-restarts K [--min-ranks M]`: the job restarts by
// itself when it fails, from the newest complete checkpoint under its
// --save, instead of waiting for a person.
//
// The supervisor stays in the foreground as the parent of the launcher
// (mpirun or srun) it starts. When the launcher exits:
//   0            the job is done: exit 0;
//   75           the ranks stopped on a signal with their checkpoint written
//                (train/stop_request.h): exit 75, for the scheduler's requeue;
//   2            a usage error, which a restart would only repeat: exit 2;
//   3            the loss diverged (non-finite on every rank), which resuming
//                the same checkpoint repeats exactly: exit 3;
//   4            every rank failed before its first step (a missing weight
//                file, a checkpoint that cannot be resumed), which a rerun
//                repeats: exit 4;
//   anything     else (a rank died, a collective timed out, a node went
//                away): start it again with `--resume auto`, up to K times,
//                after a delay that doubles with each failure in a row
//                (--restart_backoff S, S, 2S, 4S ... at most a minute; an
//                attempt that ran ten minutes starts the count over).
// A signal the supervisor receives goes to the launcher, and no restart
// follows: SIGTERM as SIGUSR1 (mpirun and srun pass SIGUSR1 to every rank,
// which saves and exits 75; mpirun kills the ranks on SIGTERM), SIGUSR1,
// SIGINT and SIGHUP as themselves.
//
// The world of each restart: the same, or with --min-ranks M the ranks that
// are still available (the slots of the hostfile, read again before each
// start: whatever takes a dead machine out of it, an operator or a health
// check, shrinks the next world), never fewer than M. A checkpoint resumes
// at any world size under every strategy, and the data order continues
// where it left off.
//
// Thread-safety: main thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace accel::app {

struct SupervisorPolicy {
  int64_t max_restarts = 0;  // 0: no supervision (launch execs the launcher)
  int64_t min_ranks = 0;     // 0: every restart uses the first world size
  std::string save_dir;      // the job's --save (where restarts resume from)
  double backoff_s = 1.0;    // the delay before the first restart of a run of failures
};

// The delay before a restart after `consecutive_failures` (>= 1) failed
// attempts in a row: backoff_s doubled each time, at most 60 s; 0 when
// backoff_s is 0.
double restart_delay_s(double backoff_s, int64_t consecutive_failures);

// The launcher's command for a world of `ranks`, attempt `attempt` (0: the
// first start). Throws cli::UsageError when it cannot be built.
using LaunchCommandFor = std::function<std::vector<std::string>(int64_t ranks, int64_t attempt)>;
// The ranks available now (re-read before each restart).
using AvailableRanks = std::function<int64_t()>;

// Runs the job under `policy` (see above) starting at `ranks`; returns the
// exit code for accel-host launch.
int supervise(const SupervisorPolicy& policy, int64_t ranks, const LaunchCommandFor& command_for,
              const AvailableRanks& available);

// `command` as one shell line, each word quoted where a shell would split
// or expand it.
std::string shell_words(const std::vector<std::string>& command);

// The command line a restart runs: `training` with `--resume auto` in place
// of any --resume the user gave (the first start keeps theirs).
std::vector<std::string> with_resume_auto(std::vector<std::string> training);

}  // namespace accel::app
