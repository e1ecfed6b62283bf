// check-plugin's data-parallel check, for plugins that declare
// ACCEL_CAP_REDUCES_GRADS: the same short run (same seed, same global batch)
// on N ranks with the plugin must train the model one rank trains — per step
// equal loss and gradient norm. A reducer that sums instead of averaging
// (gradients N times too large) or that reduces nothing (each rank trains its
// own model) fails with one line saying which.
//
// One of the two runs is this process's own (run_accel on the session it
// has); the other is a child: under mpirun (N > 1 ranks) rank 0 starts a
// one-rank `accel-host` as a job of its own; on one rank it starts `mpirun
// -n 2 accel-host` when mpirun is on PATH (else the check is skipped). The
// child gets this environment minus Open MPI's and PMIx's per-job variables,
// so it does not take itself for part of this job. Collective: every rank
// calls it. Not thread-safe.
#pragma once

#include <string>
#include <vector>

#include "host/comm/mpi_session.h"

namespace accel::app {

struct DataParallelVerdict {
  enum class Outcome { pass, fail, skip } outcome = Outcome::skip;
  std::string detail;  // one line
};

// `run_args`: accel-host arguments naming the plugin and a tiny model (no
// --steps, --batch-size or --metrics-file); `dir` is a scratch directory on
// rank 0. The same verdict on every rank.
DataParallelVerdict check_data_parallel(const std::vector<std::string>& run_args, const std::string& dir,
                                        const comm::MpiSession& mpi);

// Relative tolerance of the per-step comparison: fp32 reductions in another
// order differ by far less (the ddp tests hold 1e-5), a wrong reduction by
// far more.
inline constexpr double kDataParallelTolerance = 1e-4;

}  // namespace accel::app
