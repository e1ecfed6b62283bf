// Preemption: a run asked to stop by a signal finishes the step in hand,
// writes a complete checkpoint (under --save) and exits with
// kExitStoppedToResume, so a job script or a supervisor resumes it with
// `--resume auto`.
//
// The signals are the ones schedulers send before they kill: SIGTERM (Slurm
// at the time limit, scancel, preemption; KillWait later, SIGKILL) and
// SIGUSR1 (`sbatch --signal=USR1@SECONDS`; mpirun forwards it to every
// rank). The handler only records the signal; the training loop reads it
// at each step and every rank agrees on it in the step's loss all-reduce,
// so all ranks stop after the same step even when one rank alone was
// signalled. The handler is one-shot (SA_RESETHAND): a second SIGTERM while
// the first is being honoured kills the process the default way.
//
// Thread-safety: the scope is created and destroyed on the training thread;
// pending_stop_signal may be read from any thread.
#pragma once

#include <csignal>

namespace accel::train {

// EX_TEMPFAIL (sysexits.h): "try again later". examples/slurm/ requeues the
// job on it; no other failure of accel-host exits with it.
constexpr int kExitStoppedToResume = 75;

// Records SIGTERM and SIGUSR1 while it lives (the training loop), restoring
// the previous dispositions when it ends. Not nestable.
class StopRequestScope {
 public:
  StopRequestScope();
  ~StopRequestScope();
  StopRequestScope(const StopRequestScope&) = delete;
  StopRequestScope& operator=(const StopRequestScope&) = delete;

 private:
  struct sigaction previous_term_ {};
  struct sigaction previous_usr1_ {};
};

// The first stop signal received since the scope began; 0 when none.
int pending_stop_signal();

// "SIGTERM", "SIGUSR1", or "signal N".
const char* stop_signal_name(int signal);

}  // namespace accel::train
