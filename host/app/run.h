// The body of accel-host below main(): shared by the normal run and by
// `accel-host check-plugin`, which drives whole runs with the plugin under test.
#pragma once

#include <string>
#include <vector>

#include "host/comm/mpi_session.h"

namespace accel::app {

// Runs accel-host with `args` (argv without the program name). Returns the
// exit code of a successful action (0); throws cli::UsageError,
// plugin::PluginError or std::exception with one line on failure.
// `training_started`, when given, is set once start-up is over and the
// first step begins (main() tells a start-up failure from a later one).
int run_accel(const std::vector<std::string>& args, const comm::MpiSession& mpi, bool* training_started = nullptr);

}  // namespace accel::app
