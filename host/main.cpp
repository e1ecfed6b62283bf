// accel-host: parse the command line, start MPI, train. The one place that
// turns an error into a message and an exit code.
#include <ATen/Parallel.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "host/cli/options.h"
#include "host/comm/mpi_session.h"
#include "host/train/trainer.h"
#include "host/util/log.h"
#include "host/util/strformat.h"

namespace {

int run_training(accel::RunConfig config, const accel::comm::MpiSession& mpi) {
  accel::log::init(mpi.rank(), accel::log::parse_level(config.log_level));
  if (mpi.world_size() > 1) {
    // Averaging gradients across ranks is the data-parallel strategy's job
    // (the ddp plugin); without one, N ranks would silently train N models.
    throw accel::cli::UsageError(accel::strformat(
        "%d ranks launched, but this build has no data-parallel strategy to combine them; run one process",
        mpi.world_size()));
  }
  accel::cli::validate_for_world(config, mpi.world_size());
  if (!config.plugins.empty()) {
    throw accel::cli::UsageError("--plugin " + config.plugins.front() +
                                 ": plugin loading is not available in this build");
  }
  if (config.threads > 0) at::set_num_threads(config.threads);
  accel::train::Trainer trainer(config, mpi.rank(), mpi.world_size());
  trainer.run();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  accel::cli::ParsedCommandLine parsed;
  try {
    parsed = accel::cli::parse_command_line(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accel-host: %s\n", e.what());
    return 2;
  }
  if (parsed.action == accel::cli::Action::help) {
    std::fputs(parsed.help_text.c_str(), stdout);
    return 0;
  }
  if (parsed.action == accel::cli::Action::version) {
    std::printf("accel-host %s\n", ACCEL_VERSION);
    return 0;
  }

  accel::comm::MpiSession mpi(&argc, &argv);
  try {
    return run_training(parsed.config, mpi);
  } catch (const accel::cli::UsageError& e) {
    accel::log::error(e.what());
    if (mpi.world_size() > 1) mpi.abort_job(2);
    return 2;
  } catch (const std::exception& e) {
    accel::log::error(e.what());
    if (mpi.world_size() > 1) mpi.abort_job(1);
    return 1;
  }
}
