// Process groups: made from rank lists (in list order, any order) and by
// split (color, key), nested, with collectives that stay inside the group;
// bad rank lists rejected alike on every rank; CUDA memory on this machine
// (no GPU) failing with a message that says why instead of hanging.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "host/comm/process_group.h"
#include "tests/comm/comm_test_support.h"

namespace accel::comm {
namespace {

using testing::test_options;

class Groups : public ::testing::Test {
 protected:
  void SetUp() override {
    world_ = ProcessGroup::create_world(MPI_COMM_WORLD, 0, test_options());
    rank_ = world_->rank();
    size_ = world_->size();
  }

  // Sum of (world rank + 1) over the group: shows which ranks took part.
  static int64_t sum_of_members(ProcessGroup& g) {
    int64_t v = g.world_rank() + 1;
    EXPECT_TRUE(g.all_reduce(host_buffer(&v, 1, DType::i64), ReduceOp::sum).ok());
    return v;
  }

  std::unique_ptr<ProcessGroup> world_;
  int rank_ = 0;
  int size_ = 1;
};

TEST_F(Groups, WorldKnowsItsRanks) {
  std::vector<int> identity(size_);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(world_->world_ranks(), identity);
  EXPECT_EQ(world_->world_rank(), rank_);
  EXPECT_EQ(sum_of_members(*world_), int64_t{size_} * (size_ + 1) / 2);
}

TEST_F(Groups, FromRankListsInListOrder) {
  // Even ranks, listed in reverse: group rank i is the i-th listed rank.
  std::vector<int> evens;
  for (int r = size_ - 1; r >= 0; --r) {
    if (r % 2 == 0) evens.push_back(r);
  }
  std::unique_ptr<ProcessGroup> g = world_->new_group(evens, "evens");
  if (rank_ % 2 != 0) {
    EXPECT_EQ(g, nullptr);
  } else {
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->size(), static_cast<int>(evens.size()));
    EXPECT_EQ(g->world_ranks(), evens);
    EXPECT_EQ(g->world_ranks()[g->rank()], rank_);
    int64_t want = 0;
    for (int r : evens) want += r + 1;
    EXPECT_EQ(sum_of_members(*g), want);
    // Broadcast from group rank 0, i.e. the highest even world rank.
    int32_t token = g->rank() == 0 ? 1000 + rank_ : -1;
    ASSERT_TRUE(g->broadcast(host_buffer(&token, 1, DType::i32), 0).ok());
    EXPECT_EQ(token, 1000 + evens.front());
  }
  // The world still works after the group did its own traffic.
  EXPECT_EQ(sum_of_members(*world_), int64_t{size_} * (size_ + 1) / 2);
}

TEST_F(Groups, SingletonGroups) {
  for (int member = 0; member < size_; ++member) {
    const int list[] = {member};
    std::unique_ptr<ProcessGroup> g = world_->new_group(list, "solo" + std::to_string(member));
    EXPECT_EQ(g != nullptr, rank_ == member);
    if (g) {
      EXPECT_EQ(sum_of_members(*g), member + 1);
    }
  }
}

TEST_F(Groups, SplitByColorOrderedByKey) {
  // Two colors; key = -rank reverses the order inside each.
  std::unique_ptr<ProcessGroup> g = world_->split(rank_ % 2, -rank_, "parity");
  ASSERT_NE(g, nullptr);
  std::vector<int> want;
  for (int r = size_ - 1; r >= 0; --r) {
    if (r % 2 == rank_ % 2) want.push_back(r);
  }
  EXPECT_EQ(g->world_ranks(), want);
  int64_t want_sum = 0;
  for (int r : want) want_sum += r + 1;
  EXPECT_EQ(sum_of_members(*g), want_sum);
}

TEST_F(Groups, NegativeColorOptsOut) {
  std::unique_ptr<ProcessGroup> g = world_->split(rank_ == 0 ? -1 : 0, 0, "without0");
  EXPECT_EQ(g == nullptr, rank_ == 0);
  if (g) {
    EXPECT_EQ(g->size(), size_ - 1);
    EXPECT_EQ(sum_of_members(*g), int64_t{size_} * (size_ + 1) / 2 - 1);
  }
}

TEST_F(Groups, NestedSplitsAndCollectivesInside) {
  // A 2D mesh as plugins build one: rows of 2 ranks (tensor parallel), and
  // the columns of the same position (data parallel).
  std::unique_ptr<ProcessGroup> row = world_->split(rank_ / 2, rank_, "tp");
  std::unique_ptr<ProcessGroup> column = world_->split(rank_ % 2, rank_, "dp");
  ASSERT_NE(row, nullptr);
  ASSERT_NE(column, nullptr);
  std::unique_ptr<ProcessGroup> column_head = column->split(column->rank() == 0 ? 0 : -1, 0, "dp_head");
  EXPECT_EQ(column_head != nullptr, column->rank() == 0);
  // reduce_scatter inside a row: each member gets its slice of the row sum.
  std::vector<float> in(2 * row->size());
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(rank_ * 100 + i);
  std::vector<float> out(2);
  ASSERT_TRUE(row->reduce_scatter(host_buffer(in.data(), static_cast<int64_t>(in.size()), DType::f32),
                                  host_buffer(out.data(), 2, DType::f32), ReduceOp::sum)
                  .ok());
  float want = 0;
  for (int r : row->world_ranks()) want += static_cast<float>(r * 100 + 2 * row->rank());
  EXPECT_EQ(out[0], want);
}

TEST_F(Groups, BadRankListsAreRejectedOnEveryRank) {
  const int duplicate[] = {0, 0};
  const int outside[] = {size_};
  auto code_of = [&](std::span<const int> ranks) {
    try {
      world_->new_group(ranks, "bad");
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("new_group 'bad'"), std::string::npos) << e.what();
      return e.code();
    }
    return ErrorCode::ok;
  };
  EXPECT_EQ(code_of(duplicate), ErrorCode::invalid_argument);
  EXPECT_EQ(code_of(outside), ErrorCode::invalid_argument);
  EXPECT_EQ(code_of({}), ErrorCode::invalid_argument);
  EXPECT_TRUE(world_->barrier().ok());
}

TEST_F(Groups, CudaMemoryWithoutAGpuFailsWithTheReason) {
  float device_memory_stand_in[4] = {};
  Buffer gpu = host_buffer(device_memory_stand_in, 4, DType::f32);
  gpu.on_cuda = true;
  const Status s = world_->all_reduce(gpu, ReduceOp::sum);
  if (s.ok()) GTEST_SKIP() << "a CUDA device is present: tests/comm/nccl_test.cpp covers it";
  EXPECT_EQ(s.code, ErrorCode::failed_precondition) << s.message;
  EXPECT_NE(s.message.find("needs a CUDA device on every rank"), std::string::npos) << s.message;
  // Remembered: the next CUDA operation fails the same way without another bootstrap.
  EXPECT_EQ(world_->broadcast(gpu, 0).code, ErrorCode::failed_precondition);
  Status why;
  EXPECT_EQ(world_->nccl(&why), nullptr);
  // Host memory is unaffected.
  EXPECT_FALSE(world_->failure().has_value());
  EXPECT_EQ(sum_of_members(*world_), int64_t{size_} * (size_ + 1) / 2);
}

TEST_F(Groups, BackendMpiRejectsCudaMemory) {
  CommOptions options = test_options();
  options.backend = Backend::mpi;
  std::unique_ptr<ProcessGroup> g = ProcessGroup::create_world(MPI_COMM_WORLD, 0, options, "mpi_only");
  float x[2] = {};
  Buffer gpu = host_buffer(x, 2, DType::f32);
  gpu.on_cuda = true;
  const Status s = g->all_reduce(gpu, ReduceOp::sum);
  EXPECT_EQ(s.code, ErrorCode::unsupported);
  EXPECT_NE(s.message.find("backend mpi"), std::string::npos) << s.message;
}

}  // namespace
}  // namespace accel::comm
