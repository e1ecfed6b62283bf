// accel-host check-plugin PATH [run options...]: the conformance checker a
// plugin vendor runs on their .so. It loads the plugin the way a run does,
// checks the ABI contract one item at a time, then drives it through a whole
// lifecycle on a tiny model (train, save, resume, train on) — on several
// ranks under mpirun, with ddp as the data-parallel strategy — and, for a
// plugin that reduces gradients, checks that N ranks train the model one rank
// trains (check_data_parallel.h). Prints one PASS/FAIL/SKIP line per check
// and a summary. Extra arguments are passed to
// the runs (e.g. --NAME.required_option=value).
#pragma once

#include <string>
#include <vector>

#include "host/comm/mpi_session.h"

namespace accel::app {

// Returns 0 when every check passed, 1 otherwise; prints on rank 0.
int check_plugin(const std::vector<std::string>& args, const comm::MpiSession& mpi);

}  // namespace accel::app
