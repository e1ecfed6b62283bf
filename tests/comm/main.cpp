// GoogleTest main for the multi-rank communication tests: MPI starts through
// the host's own MpiSession (MPI_THREAD_MULTIPLE), and only rank 0 prints the
// full report — the other ranks print their failures, prefixed with their
// rank, so four interleaved copies of every line do not bury the one that
// failed. Logging is off unless ACCEL_COMM_TEST_LOG names a level: the
// failure tests provoke timeouts whose error logs are expected.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "host/comm/mpi_session.h"
#include "host/util/log.h"

namespace {

class FailuresOnly : public ::testing::EmptyTestEventListener {
 public:
  explicit FailuresOnly(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(), result.summary());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
    }
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  accel::comm::MpiSession session(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  const char* level = std::getenv("ACCEL_COMM_TEST_LOG");
  accel::log::init(session.rank(), level ? accel::log::parse_level(level) : accel::log::Level::off, true);
  if (session.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailuresOnly(session.rank()));
  }
  const int failed = RUN_ALL_TESTS();
  // Every rank reports the job's verdict: one rank's failure fails all.
  return session.all_succeeded(failed == 0) ? 0 : 1;
}
