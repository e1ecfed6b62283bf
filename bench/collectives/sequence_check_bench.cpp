// The cost of the collective sequence check (host/comm/sequence_check.h),
// measured alone, under mpirun: per step, K collectives recorded and one
// step-end exchange around the ring (the always-on check); per collective,
// the verify mode's neighbour round trip (ACCEL_COMM_VERIFY=ops); and, as
// the yardstick, the latency of one small MPI_Allreduce on the same ranks.
// Run by hand (docs/benchmarks.md, "Collective checks"); never a test.
//   mpirun -n 2 build/bin/accel_sequence_check_bench [steps] [ops_per_step]
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <vector>

#include "host/comm/mpi_session.h"
#include "host/comm/sequence_check.h"

using accel::comm::OpDescriptor;
using accel::comm::SequenceCheck;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

OpDescriptor op(int i) {
  OpDescriptor d;
  d.op = accel::comm::OpType::all_reduce;
  d.count = 1024 + i;
  d.reduce = 0;
  d.label = "bench bucket all_reduce";
  return d;
}

std::vector<int> ranks(int n) {
  std::vector<int> r(static_cast<size_t>(n));
  std::iota(r.begin(), r.end(), 0);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  accel::comm::MpiSession session(&argc, &argv);
  const int steps = argc > 1 ? std::atoi(argv[1]) : 2000;
  const int ops = argc > 2 ? std::atoi(argv[2]) : 16;
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  double step_s = 0.0, verify_s = 0.0, allreduce_s = 0.0;
  {
    SequenceCheck check(MPI_COMM_WORLD, "world", ranks(size), 60000, false);
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t = Clock::now();
    for (int s = 0; s < steps; ++s) {
      for (int i = 0; i < ops; ++i) check.before_op(op(i), s);
      check.end_step(s);
    }
    step_s = seconds_since(t) / steps;
  }
  {
    SequenceCheck check(MPI_COMM_WORLD, "world", ranks(size), 60000, true);
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t = Clock::now();
    for (int s = 0; s < steps; ++s) {
      for (int i = 0; i < ops; ++i) check.before_op(op(i), s);
      check.end_step(s);
    }
    verify_s = (seconds_since(t) / steps - step_s) / ops;
  }
  {
    float x = 1.0f, y = 0.0f;
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t = Clock::now();
    for (int s = 0; s < steps; ++s) MPI_Allreduce(&x, &y, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    allreduce_s = seconds_since(t) / steps;
  }
  if (rank == 0) {
    std::printf("ranks %d, %d steps of %d collectives\n", size, steps, ops);
    std::printf("  always-on check, per step (record %d + ring exchange): %8.2f us\n", ops, step_s * 1e6);
    std::printf("  verify mode, extra per collective:                     %8.2f us\n", verify_s * 1e6);
    std::printf("  yardstick: one 4-byte MPI_Allreduce:                   %8.2f us\n", allreduce_s * 1e6);
  }
  return 0;
}
