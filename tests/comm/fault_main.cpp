// Whole-job failure scenarios, one per run, driven by expect_job_failure.cmake
// which asserts that mpirun exits non-zero within a bound and prints the
// cause. Each mode is what a training step would do when a peer fails:
//
//   kill     rank 1 dies (_exit(3)) just before an all_reduce; the others are
//            inside it. Open MPI notices the dead process and ends the job;
//            if it did not, their deadline would (abort_all).
//   skip     the last rank skips an all_reduce and stalls (a data loader
//            that hangs); the others' all_reduce times out, and the first to
//            see it ends the job with abort_all naming the operation.
//            (The skipper must not issue a *different* collective instead:
//            MPI matches collectives by order, not kind, so a barrier would
//            be paired with the others' all_reduce — undefined behaviour that
//            can even "complete". The flight recorders show such a
//            divergence: same seq, different operation.)
//   unwaited the others launch an all_reduce and never wait on it (their loop
//            thread is stuck elsewhere); the watchdog times it out and ends
//            the job.
//
// A mode that returns normally is a test failure (exit 0 means the fault
// went unnoticed).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "host/comm/abort.h"
#include "host/comm/mpi_communicator.h"
#include "host/comm/mpi_session.h"
#include "host/util/log.h"

using namespace accel::comm;

namespace {

int run(const std::string& mode, const MpiSession& session) {
  const int rank = session.rank();
  const int last = session.world_size() - 1;
  CommOptions options;
  options.timeout_ms = 3000;
  options.abort_grace_ms = 500;
  MpiCommunicator comm(MPI_COMM_WORLD, "world", options);
  static std::vector<float> grads(1 << 16, 1.0f);
  const Buffer b = host_buffer(grads.data(), static_cast<int64_t>(grads.size()), DType::f32);
  if (!comm.all_reduce(b, ReduceOp::sum, {0, "step 0 grads"}).ok()) return 2;

  if (mode == "kill") {
    if (rank == 1) {
      std::fprintf(stderr, "rank 1: exiting abruptly before the all_reduce\n");
      std::fflush(stderr);
      _exit(3);
    }
    const Status s = comm.all_reduce(b, ReduceOp::sum, {0, "step 1 grads"});
    if (!s.ok()) abort_all(s.to_string());
  } else if (mode == "skip") {
    if (rank == last) {
      std::this_thread::sleep_for(std::chrono::seconds(60));  // stalls; killed by the abort
    } else {
      const Status s = comm.all_reduce(b, ReduceOp::sum, {0, "step 1 grads"});
      if (!s.ok()) abort_all(s.to_string());
    }
  } else if (mode == "unwaited") {
    if (rank == last) {
      std::this_thread::sleep_for(std::chrono::seconds(60));
    } else {
      std::shared_ptr<Work> work =
          comm.all_reduce_async(b, b, ReduceOp::sum, {0, "step 1 grads (overlapped)"});
      std::this_thread::sleep_for(std::chrono::seconds(60));  // stuck in "compute"
    }
  } else {
    std::fprintf(stderr, "usage: accel_comm_fault_test kill|skip|unwaited\n");
    return 64;
  }
  std::fprintf(stderr, "rank %d: the fault went unnoticed\n", rank);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MpiSession session(&argc, &argv);
  accel::log::init(session.rank(), accel::log::Level::warn, true);
  return run(argc > 1 ? argv[1] : "", session);
}
