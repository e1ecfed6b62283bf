// Timeouts and failures, in process (the tests that end the job are in
// fault_main.cpp): one rank skips a collective and the others' wait fails
// within the timeout, naming the operation, its label and sequence number;
// the communicator then fails fast; a receive whose sender never sends times
// out naming the peer; an operation nobody waits on is caught by the
// watchdog, which ends the job (here: a handler that records it); the
// flight recorder is written to a file on the first failure.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "host/comm/mpi_communicator.h"
#include "tests/comm/comm_test_support.h"

namespace accel::comm {
namespace {

using testing::test_options;

using Clock = std::chrono::steady_clock;

int64_t ms_since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

// Lets every rank leave a test together, whatever its communicator did.
void resync() { MPI_Barrier(MPI_COMM_WORLD); }

class Failures : public ::testing::Test {
 protected:
  void SetUp() override {
    rank_ = testing::world_rank();
    size_ = testing::world_size();
  }
  int rank_ = 0;
  int size_ = 1;
};

TEST_F(Failures, SkippedCollectiveTimesOutNamingTheOperation) {
  if (size_ < 2) GTEST_SKIP() << "needs a peer to skip";
  MpiCommunicator comm(MPI_COMM_WORLD, "world", test_options());
  // Static: the abandoned all_reduce stays pending in MPI, which may write
  // into its buffer for as long as the process lives.
  static std::vector<float> x(16, 1.0f);
  const Buffer b = host_buffer(x.data(), 16, DType::f32);
  ASSERT_TRUE(comm.all_reduce(b, ReduceOp::sum, {0, "warm-up"}).ok());
  const bool skipper = rank_ == size_ - 1;
  if (!skipper) {
    const auto start = Clock::now();
    const Status s = comm.all_reduce(b, ReduceOp::sum, {1500, "ddp bucket 7"});
    const int64_t waited = ms_since(start);
    EXPECT_EQ(s.code, ErrorCode::timeout) << s.message;
    EXPECT_NE(s.message.find("all_reduce #2 'ddp bucket 7' (f32 x16)"), std::string::npos) << s.message;
    EXPECT_NE(s.message.find("did not complete within 1500 ms"), std::string::npos) << s.message;
    EXPECT_NE(s.message.find("rank " + std::to_string(rank_)), std::string::npos) << s.message;
    // A lower bound only: an upper one would measure the machine's load.
    // That the wait ends at all is the code `timeout` (and ctest's limit).
    EXPECT_GE(waited, 1400);
    // The communicator is failed: the next operation fails without waiting
    // (code `aborted`, not a second `timeout`), naming the first failure.
    const Status next = comm.barrier();
    EXPECT_EQ(next.code, ErrorCode::aborted);
    EXPECT_NE(next.message.find("failed earlier"), std::string::npos) << next.message;
    EXPECT_NE(next.message.find("ddp bucket 7"), std::string::npos) << next.message;
    ASSERT_TRUE(comm.failure().has_value());
    const std::vector<OpRecord> records = comm.flight_recorder().snapshot();
    ASSERT_GE(records.size(), 2u);
    EXPECT_EQ(records[0].state, OpState::completed);
    EXPECT_EQ(records[1].state, OpState::timed_out);
    EXPECT_EQ(records[1].label, "ddp bucket 7");
  }
  resync();
}

TEST_F(Failures, SkippedRingAllReduceTimesOutAndIsWithdrawn) {
  if (size_ < 2) GTEST_SKIP() << "needs a peer to skip";
  CommOptions options = test_options();
  options.ring_all_reduce_min_bytes = 0;
  MpiCommunicator comm(MPI_COMM_WORLD, "world", options);
  std::vector<float> x(1000, 1.0f);
  const Buffer b = host_buffer(x.data(), 1000, DType::f32);
  ASSERT_TRUE(comm.all_reduce(b, ReduceOp::sum, {0, "ring warm-up"}).ok());
  EXPECT_EQ(x[999], static_cast<float>(size_));
  if (rank_ != size_ - 1) {
    const auto start = Clock::now();
    const Status s = comm.all_reduce(b, ReduceOp::avg, {1000, "ring bucket"});
    EXPECT_EQ(s.code, ErrorCode::timeout) << s.message;
    EXPECT_NE(s.message.find("all_reduce #2 'ring bucket' (f32 x1000) did not complete within 1000 ms"),
              std::string::npos)
        << s.message;
    EXPECT_GE(ms_since(start), 900);
  }
  // Point-to-point steps were cancelled or freed: nothing of this ring can
  // write into `x` after the test (unlike an abandoned MPI collective).
  resync();
}

TEST_F(Failures, ReceiveFromASilentPeerTimesOutNamingThePeer) {
  if (size_ < 2) GTEST_SKIP() << "needs a peer";
  MpiCommunicator comm(MPI_COMM_WORLD, "world", test_options());
  if (rank_ == 0) {
    int32_t value = 0;
    const Status s = comm.recv(host_buffer(&value, 1, DType::i32), 1, 9, {800, "pipeline activations"});
    EXPECT_EQ(s.code, ErrorCode::timeout) << s.message;
    EXPECT_NE(s.message.find("recv #1 'pipeline activations' (i32 x1) from peer 1 (world rank 1)"),
              std::string::npos)
        << s.message;
    EXPECT_NE(s.message.find("the peer did not send it"), std::string::npos) << s.message;
  }
  resync();  // the receive was cancelled: nothing is left pending
}

TEST_F(Failures, WrongLengthMessageFailsTheReceive) {
  if (size_ < 2) GTEST_SKIP() << "needs a peer";
  MpiCommunicator comm(MPI_COMM_WORLD, "world", test_options());
  if (rank_ < 2) {
    std::vector<int32_t> data(10, 1);
    const Status s = rank_ == 1 ? comm.send(host_buffer(data.data(), 7, DType::i32), 0, 1)
                                : comm.recv(host_buffer(data.data(), 10, DType::i32), 1, 1);
    if (rank_ == 0) {
      EXPECT_EQ(s.code, ErrorCode::internal);
      EXPECT_NE(s.message.find("received 7 elements from peer 1, expected 10"), std::string::npos)
          << s.message;
    } else {
      EXPECT_TRUE(s.ok()) << s.message;
    }
  }
  resync();
}

TEST_F(Failures, WatchdogEndsTheJobWhenNobodyWaits) {
  if (size_ < 2) GTEST_SKIP() << "needs a peer to skip";
  std::atomic<bool> ended{false};
  std::string reason;
  std::mutex mu;
  CommOptions options = test_options(700);
  options.abort_on_failure = true;
  options.abort_grace_ms = 200;
  options.fatal_handler = [&](const std::string& why) {
    std::lock_guard<std::mutex> lock(mu);
    reason = why;
    ended = true;
  };
  static std::vector<float> x(4, 1.0f);  // the abandoned request may still own it
  {
    MpiCommunicator comm(MPI_COMM_WORLD, "world", options);
    if (rank_ != size_ - 1) {
      // Launched, never waited: the loop thread is "stuck elsewhere".
      std::shared_ptr<Work> work =
          comm.all_reduce_async(host_buffer(x.data(), 4, DType::f32), host_buffer(x.data(), 4, DType::f32),
                                ReduceOp::sum, {0, "never waited"});
      // The cap only keeps a broken watchdog from hanging the test; how soon
      // it fires under load is not asserted (a lower bound is: not early).
      const auto start = Clock::now();
      while (!ended && ms_since(start) < 60000) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      const int64_t took = ms_since(start);
      EXPECT_TRUE(ended);
      EXPECT_GE(took, 700 + 200 - 100);
      std::lock_guard<std::mutex> lock(mu);
      EXPECT_NE(reason.find("all_reduce #1 'never waited'"), std::string::npos) << reason;
      EXPECT_NE(reason.find("the watchdog of rank"), std::string::npos) << reason;
      EXPECT_EQ(work->status().code, ErrorCode::timeout);
    }
  }
  resync();
}

TEST_F(Failures, FlightRecorderIsWrittenOnTheFirstFailure) {
  if (size_ < 2) GTEST_SKIP() << "needs a peer to skip";
  const std::string dir = "/tmp";
  CommOptions options = test_options();
  options.flight_recorder_dir = dir;
  MpiCommunicator comm(MPI_COMM_WORLD, "fr_test", options);
  static std::vector<double> x(3, 0.0);
  const Buffer b = host_buffer(x.data(), 3, DType::f64);
  ASSERT_TRUE(comm.barrier({0, "before"}).ok());
  if (rank_ == 0) {
    EXPECT_EQ(comm.broadcast(b, 1, {600, "skipped by the others"}).code, ErrorCode::timeout);
    const std::string path = dir + "/flight_recorder_rank0_fr_test_mpi.txt";
    std::ifstream in(path);
    ASSERT_TRUE(in.good()) << path;
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_NE(text.str().find("seq=1 barrier"), std::string::npos) << text.str();
    EXPECT_NE(text.str().find("seq=2 broadcast f64 x3 peer=1 label='skipped by the others'"),
              std::string::npos)
        << text.str();
    EXPECT_NE(text.str().find("TIMED_OUT"), std::string::npos) << text.str();
    std::remove(path.c_str());
  }
  resync();
}

TEST_F(Failures, WaitWithAShorterTimeoutAndTestNeverBlocks) {
  if (size_ < 2) GTEST_SKIP() << "needs a peer to skip";
  MpiCommunicator comm(MPI_COMM_WORLD, "world", test_options());
  static int64_t v = 0;
  if (rank_ == 0) {
    std::shared_ptr<Work> w =
        comm.all_reduce_async(host_buffer(&v, 1, DType::i64), host_buffer(&v, 1, DType::i64), ReduceOp::sum);
    // No clock (the machines are shared): a test() that blocked would run
    // into the work's 20 s deadline and leave it finished (timed out).
    for (int i = 0; i < 1000; ++i) EXPECT_FALSE(w->test());
    EXPECT_FALSE(w->finished());
    EXPECT_EQ(w->wait(300).code, ErrorCode::timeout);
    EXPECT_TRUE(w->finished());
    EXPECT_TRUE(w->test());
  }
  resync();
}

}  // namespace
}  // namespace accel::comm
