// accel-host: the one place that turns an error into a message and an exit
// code. Subcommands: `check-plugin PATH` (host/app/check_plugin.h),
// `merge-weights CHECKPOINT_DIR OUTPUT_PATH` (host/app/merge_weights.h);
// anything else is a run (host/app/run.h).
//
// Exit codes: 0 success, 1 runtime failure, 2 usage error (bad option or
// value, a plugin that cannot be loaded).
#include <exception>
#include <string>
#include <vector>

#include "host/app/check_plugin.h"
#include "host/app/merge_weights.h"
#include "host/app/run.h"
#include "host/cli/options.h"
#include "host/comm/mpi_session.h"
#include "host/plugin/plugin_error.h"
#include "host/util/log.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  accel::comm::MpiSession mpi(&argc, &argv);
  int code = 0;
  try {
    if (!args.empty() && args.front() == "check-plugin") {
      code = accel::app::check_plugin({args.begin() + 1, args.end()}, mpi);
    } else if (!args.empty() && args.front() == "merge-weights") {
      code = accel::app::merge_weights_command({args.begin() + 1, args.end()}, mpi);
    } else {
      code = accel::app::run_accel(args, mpi);
    }
  } catch (const accel::cli::UsageError& e) {
    accel::log::error(e.what());
    code = 2;
  } catch (const std::exception& e) {
    accel::log::error(e.what());
    code = 1;
  }
  if (code != 0 && mpi.world_size() > 1) mpi.abort_job(code);
  return code;
}
