// accel-host: the one place that turns an error into a message and an exit
// code. Subcommands: `check-plugin PATH` (host/app/check_plugin.h),
// `merge-weights CHECKPOINT_DIR OUTPUT_PATH` (host/app/merge_weights.h),
// `export-hf CHECKPOINT_DIR OUTPUT_DIR` (host/app/export_hf.h),
// `generate CHECKPOINT_DIR --prompt ...` (host/app/generate.h),
// `launch [OPTIONS] -- TRAINING OPTIONS` (host/app/launch.h, before MPI starts);
// a first word that is not an option is a usage error; anything else is a
// run (host/app/run.h).
//
// Exit codes: 0 success, 1 runtime failure, 2 usage error (bad option or
// value, an output file rank 0 cannot open, a plugin that cannot be
// loaded, ranks started with different settings), 3 the loss diverged
// (non-finite on every rank past --nonfinite-loss-skips: resuming repeats
// it), 4 a run failed before its first step on every rank (a missing or
// damaged file: rerunning repeats it; util/agreed_error.h), 75 stopped by SIGTERM or SIGUSR1 after a checkpoint (resume it:
// train/stop_request.h). Every error is one line: LibTorch's backtraces are cut off.
// An AgreedError was raised by every rank at once, so each exits normally
// with its code (only rank 0 prints it, unless each printed its own). Any
// other failure is printed by the rank that met it; the failing ranks then
// wait a moment for each other (MpiSession::every_rank_is_failing): when
// every rank failed (the same damaged file read by all) each exits normally
// with its code, one line per rank and no MPI_Abort banner; when a rank
// failed alone the job is aborted (MPI_Abort) so no rank waits forever.
#include <c10/util/Exception.h>

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "host/app/check_plugin.h"
#include "host/app/export_hf.h"
#include "host/app/generate.h"
#include "host/app/launch.h"
#include "host/app/merge_weights.h"
#include "host/app/run.h"
#include "host/cli/options.h"
#include "host/comm/launcher_env.h"
#include "host/comm/mpi_session.h"
#include "host/plugin/plugin_error.h"
#include "host/train/stop_request.h"
#include "host/util/agreed_error.h"
#include "host/util/log.h"

namespace {

// How long a failing rank waits for the others to fail too before it ends
// the job: ranks that read the same bad input fail within moments of each
// other; a rank that failed alone costs the job this much more.
constexpr int64_t kWaitForOtherFailuresMs = 5000;

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  // launch starts the ranks (mpirun or srun) and is none of them: no MPI here.
  if (!args.empty() && args.front() == "launch") {
    accel::log::init(0, accel::log::Level::info);
    try {
      return accel::app::launch_command({args.begin() + 1, args.end()});
    } catch (const accel::cli::UsageError& e) {
      accel::log::error(e.what());
      return 2;
    } catch (const std::exception& e) {
      accel::log::error(first_line(e.what()));
      return 1;
    }
  }
  // A training run records SIGTERM and SIGUSR1 from its first moment, not
  // only once its loop runs: a job asked to stop during start-up (model
  // creation, --init-from, resume) stops after its first step with exit 75,
  // instead of dying of the signal (train/stop_request.h).
  const bool training_run = args.empty() || (!args.front().empty() && args.front()[0] == '-');
  std::optional<accel::train::StopRequestScope> stop_signals;
  if (training_run) stop_signals.emplace();
  // Read before MPI_Init, which may add to the environment.
  const accel::comm::LauncherEnv launcher = accel::comm::LauncherEnv::from_environment();
  if (const auto problem = launcher.problem_before_init()) {
    accel::log::init(launcher.launcher_rank(), accel::log::Level::info);
    accel::log::error(*problem);  // every task prints it: each is alone
    return 2;
  }
  accel::comm::MpiSession mpi(&argc, &argv);
  int code = 0;
  bool agreed = false;
  bool training_started = false;
  try {
    if (const auto problem = launcher.problem_after_init(mpi.world_size())) throw accel::cli::UsageError(*problem);
    if (!args.empty() && args.front() == "check-plugin") {
      code = accel::app::check_plugin({args.begin() + 1, args.end()}, mpi);
    } else if (!args.empty() && args.front() == "merge-weights") {
      code = accel::app::merge_weights_command({args.begin() + 1, args.end()}, mpi);
    } else if (!args.empty() && args.front() == "export-hf") {
      code = accel::app::export_hf_command({args.begin() + 1, args.end()}, mpi);
    } else if (!args.empty() && args.front() == "generate") {
      code = accel::app::generate_command({args.begin() + 1, args.end()}, mpi);
    } else if (!args.empty() && !args.front().empty() && args.front()[0] != '-') {
      throw accel::cli::UsageError("unknown command '" + args.front() + "' (commands: " +
                                   accel::cli::kSubcommands + "; a run takes --options only)");
    } else {
      code = accel::app::run_accel(args, mpi, &training_started);
    }
  } catch (const accel::AgreedError& e) {
    if (mpi.rank() == 0 && !e.logged) accel::log::error(e.what());
    code = e.exit_code;
    agreed = true;
  } catch (const accel::cli::UsageError& e) {
    accel::log::error(e.what());
    code = 2;
  } catch (const c10::Error& e) {
    accel::log::error(first_line(e.what_without_backtrace()));
    code = 1;
  } catch (const std::exception& e) {
    accel::log::error(first_line(e.what()));
    code = 1;
  }
  if (code != 0 && mpi.world_size() > 1 && !agreed && !mpi.every_rank_is_failing(kWaitForOtherFailuresMs)) {
    mpi.abort_job(code);
  }
  // Here every rank failed (or the only one did): before the first step,
  // that is no accident a rerun would avoid.
  if (code == 1 && training_run && !training_started) code = accel::kExitFailedAtStartup;
  return code;
}
