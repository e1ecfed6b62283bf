// The MPI backend beyond the dtype matrix: the synchronous forms, several
// asynchronous operations in flight at once and finished in any order,
// rounding of inexact low-precision sums (close to fp32, identical on every
// rank), request validation (clear codes and messages, and a rejected
// request does not break the communicator), and what the flight recorder
// holds after a few operations.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "host/comm/mpi_communicator.h"
#include "tests/comm/comm_test_support.h"

namespace accel::comm {
namespace {

using testing::test_options;
using testing::TypedBuffer;

class MpiCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    comm_ = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, "world", test_options());
    rank_ = comm_->rank();
    size_ = comm_->size();
  }
  std::unique_ptr<MpiCommunicator> comm_;
  int rank_ = 0;
  int size_ = 1;
};

TEST_F(MpiCommunicatorTest, SynchronousForms) {
  std::vector<float> x(10, static_cast<float>(rank_ + 1));
  ASSERT_TRUE(comm_->all_reduce(host_buffer(x.data(), 10, DType::f32), ReduceOp::sum).ok());
  EXPECT_EQ(x[9], static_cast<float>(size_ * (size_ + 1) / 2));

  std::vector<int32_t> mine = {rank_, rank_ * 10};
  std::vector<int32_t> all(2 * size_);
  ASSERT_TRUE(comm_
                  ->all_gather(host_buffer(mine.data(), 2, DType::i32),
                               host_buffer(all.data(), 2 * size_, DType::i32))
                  .ok());
  for (int r = 0; r < size_; ++r) EXPECT_EQ(all[2 * r + 1], r * 10);

  std::vector<double> chunks(3 * size_, 1.0);
  std::vector<double> mine_sum(3);
  ASSERT_TRUE(comm_
                  ->reduce_scatter(host_buffer(chunks.data(), 3 * size_, DType::f64),
                                   host_buffer(mine_sum.data(), 3, DType::f64), ReduceOp::avg)
                  .ok());
  EXPECT_EQ(mine_sum[2], 1.0);

  int64_t token = rank_ == 0 ? 42 : 0;
  ASSERT_TRUE(comm_->broadcast(host_buffer(&token, 1, DType::i64), 0).ok());
  EXPECT_EQ(token, 42);
  ASSERT_TRUE(comm_->barrier().ok());

  if (size_ >= 2 && rank_ < 2) {
    // Small messages go eagerly: a plain send then recv on rank 0 cannot deadlock.
    int32_t value = rank_ == 0 ? 7 : 0;
    const Buffer b = host_buffer(&value, 1, DType::i32);
    Status s = rank_ == 0 ? comm_->send(b, 1, 3) : comm_->recv(b, 0, 3);
    ASSERT_TRUE(s.ok()) << s.message;
    EXPECT_EQ(value, 7);
  }
}

TEST_F(MpiCommunicatorTest, ManyInFlightFinishInAnyOrder) {
  constexpr int kOps = 8;
  std::vector<std::vector<float>> buffers(kOps);
  std::vector<std::shared_ptr<Work>> works;
  for (int k = 0; k < kOps; ++k) {
    buffers[k].assign(1000 + k, static_cast<float>(k));
    const Buffer b = host_buffer(buffers[k].data(), 1000 + k, DType::f32);
    works.push_back(comm_->all_reduce_async(b, b, ReduceOp::max));
  }
  for (int k = kOps - 1; k >= 0; --k) {
    ASSERT_TRUE(works[k]->wait().ok()) << works[k]->status().message;
    EXPECT_EQ(buffers[k].back(), static_cast<float>(k));
  }
  // Sequence numbers follow issue order.
  for (int k = 1; k < kOps; ++k) EXPECT_EQ(works[k]->seq(), works[k - 1]->seq() + 1);
}

TEST_F(MpiCommunicatorTest, InexactBf16SumsStayCloseAndAgreeAcrossRanks) {
  constexpr int64_t kCount = 4099;
  TypedBuffer x(DType::bf16, kCount);
  for (int64_t i = 0; i < kCount; ++i) x.set(i, std::sin(0.37 * i + rank_) * (1.0 + i % 17) / 3.0);
  std::vector<double> want(kCount, 0.0);
  for (int r = 0; r < size_; ++r) {
    TypedBuffer contribution(DType::bf16, 1);
    for (int64_t i = 0; i < kCount; ++i) {
      contribution.set(0, std::sin(0.37 * i + r) * (1.0 + i % 17) / 3.0);
      want[i] += contribution.get(0);
    }
  }
  ASSERT_TRUE(comm_->all_reduce(x.view(), ReduceOp::sum).ok());
  double scale = 0;
  for (int64_t i = 0; i < kCount; ++i) scale = std::max(scale, std::fabs(want[i]));
  for (int64_t i = 0; i < kCount; ++i) {
    // One bf16 rounding (2^-8 relative) per combine, of partial sums no larger than `scale`.
    EXPECT_NEAR(x.get(i), want[i], size_ * scale * std::ldexp(1.0, -8)) << "element " << i;
  }
  // Every rank holds the same bits: gather everyone's result and compare.
  TypedBuffer all(DType::bf16, kCount * size_);
  ASSERT_TRUE(comm_->all_gather(x.view(), all.view()).ok());
  for (int r = 0; r < size_; ++r) {
    EXPECT_EQ(std::memcmp(all.bytes.data() + r * x.bytes.size(), x.bytes.data(), x.bytes.size()), 0)
        << "rank " << r;
  }
}

TEST_F(MpiCommunicatorTest, InvalidRequestsFailClearlyAndLeaveTheCommunicatorUsable) {
  std::vector<float> a(8), b(9);
  const Buffer a8 = host_buffer(a.data(), 8, DType::f32);
  auto expect = [](const std::shared_ptr<Work>& w, ErrorCode code, const char* words) {
    ASSERT_TRUE(w->finished());
    EXPECT_EQ(w->status().code, code) << w->status().message;
    EXPECT_NE(w->status().message.find(words), std::string::npos) << w->status().message;
    EXPECT_NE(w->status().message.find("rank "), std::string::npos) << w->status().message;
  };
  expect(comm_->all_reduce_async(a8, host_buffer(b.data(), 9, DType::f32), ReduceOp::sum),
         ErrorCode::invalid_argument, "output has 9 elements, input 8");
  expect(comm_->all_reduce_async(a8, host_buffer(b.data(), 8, DType::f64), ReduceOp::sum),
         ErrorCode::invalid_argument, "input dtype f32 differs from output dtype f64");
  expect(comm_->all_gather_async(a8, host_buffer(b.data(), 9, DType::f32)), ErrorCode::invalid_argument,
         "all_gather needs group size");
  std::vector<int32_t> ints(4);
  expect(comm_->all_reduce_async(host_buffer(ints.data(), 4, DType::i32),
                                 host_buffer(ints.data(), 4, DType::i32), ReduceOp::avg),
         ErrorCode::unsupported, "avg of integer dtype i32");
  expect(comm_->broadcast_async(a8, size_), ErrorCode::invalid_argument, "root");
  expect(comm_->send_async(a8, -1, 0), ErrorCode::invalid_argument, "peer -1 is not a rank");
  expect(comm_->recv_async(a8, 0, -5), ErrorCode::invalid_argument, "tag -5");
  expect(comm_->all_reduce_async(host_buffer(nullptr, 3, DType::f32), host_buffer(nullptr, 3, DType::f32),
                                 ReduceOp::sum),
         ErrorCode::invalid_argument, "NULL but has 3 elements");
  Buffer on_gpu = a8;
  on_gpu.on_cuda = true;
  expect(comm_->all_reduce_async(on_gpu, on_gpu, ReduceOp::sum), ErrorCode::invalid_argument, "host memory");
  if (size_ > 1) {
    expect(comm_->all_to_all_async(host_buffer(a.data(), size_ + 1, DType::f32),
                                   host_buffer(b.data(), size_ + 1, DType::f32)),
           ErrorCode::invalid_argument, "do not split into group size");
  }
  EXPECT_FALSE(comm_->failure().has_value());
  EXPECT_TRUE(comm_->barrier().ok());
}

TEST_F(MpiCommunicatorTest, FlightRecorderHoldsTheOperations) {
  std::vector<float> x(4, 1.0f);
  ASSERT_TRUE(comm_->all_reduce(host_buffer(x.data(), 4, DType::f32), ReduceOp::sum, {0, "grads"}).ok());
  ASSERT_TRUE(comm_->broadcast(host_buffer(x.data(), 4, DType::f32), 0, {0, "weights"}).ok());
  ASSERT_TRUE(comm_->barrier({0, "step end"}).ok());
  const std::vector<OpRecord> records = comm_->flight_recorder().snapshot();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].op, OpType::all_reduce);
  EXPECT_EQ(records[0].label, "grads");
  EXPECT_EQ(records[0].count, 4);
  EXPECT_EQ(records[1].op, OpType::broadcast);
  EXPECT_EQ(records[1].peer, 0);
  EXPECT_EQ(records[2].label, "step end");
  for (const OpRecord& r : records) {
    EXPECT_EQ(r.state, OpState::completed);
    EXPECT_GE(r.finished_us, r.issued_us);
  }
  EXPECT_EQ(records[2].seq, records[0].seq + 2);
}

}  // namespace
}  // namespace accel::comm
