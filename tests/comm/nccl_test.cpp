// The NCCL backend. Everywhere: the process holds exactly one libnccl and
// one libcudart, the torch wheel's, and the NCCL it runs is the version the
// backend was compiled against (the one-NCCL rule); without a CUDA device,
// creating the communicator fails on every rank alike with the reason,
// instead of some ranks waiting for others in the bootstrap. Where each rank
// has its own GPU (a machine lent for it): the collectives on device memory,
// and a skipped collective timing out through ncclCommAbort.
#include <gtest/gtest.h>
#include <link.h>

#include <cstring>
#include <string>
#include <vector>

#include "host/comm/nccl_communicator.h"
#include "host/comm/process_group.h"
#include "tests/comm/comm_test_support.h"

namespace accel::comm {
namespace {

using testing::test_options;

std::vector<std::string> loaded_libraries(const char* prefix) {
  std::vector<std::string> found;
  struct Query {
    const char* prefix;
    std::vector<std::string>* found;
  } query{prefix, &found};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* q = static_cast<Query*>(data);
        const std::string path = info->dlpi_name ? info->dlpi_name : "";
        const size_t slash = path.rfind('/');
        const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
        if (name.rfind(q->prefix, 0) == 0) q->found->push_back(path);
        return 0;
      },
      &query);
  return found;
}

TEST(Nccl, OneNcclAndOneCudaRuntimeFromTheWheel) {
  for (const char* prefix : {"libnccl.so", "libcudart.so"}) {
    const std::vector<std::string> found = loaded_libraries(prefix);
    ASSERT_EQ(found.size(), 1u) << prefix;
    EXPECT_NE(found[0].find("/nvidia/"), std::string::npos) << found[0] << " is not the torch wheel's";
    EXPECT_EQ(found[0].find("/usr/local/cuda"), std::string::npos) << found[0];
  }
  EXPECT_EQ(nccl_runtime_version(), nccl_header_version())
      << "compiled against one NCCL, running another (docs/dependencies.md)";
}

class NcclWithoutDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count(&why_) > 0) GTEST_SKIP() << "this machine has a CUDA device";
  }
  std::string why_;
};

TEST_F(NcclWithoutDevice, DeviceCountSaysWhy) { EXPECT_FALSE(why_.empty()); }

TEST_F(NcclWithoutDevice, ConstructionFailsOnEveryRankNamingTheFirst) {
  try {
    make_nccl_communicator(MPI_COMM_WORLD, 0, "world", test_options());
    FAIL() << "created an NCCL communicator without a device";
  } catch (const CommError& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.code(), ErrorCode::failed_precondition);
    EXPECT_NE(message.find("needs a CUDA device on every rank"), std::string::npos) << message;
    if (testing::world_rank() == 0) {
      EXPECT_NE(message.find("this rank (0 of group 'world') has none: " + why_), std::string::npos)
          << message;
    } else {
      EXPECT_NE(message.find("rank 0 of group 'world' has none"), std::string::npos) << message;
    }
  }
}

TEST_F(NcclWithoutDevice, ExplicitNcclBackendFailsAtGroupCreation) {
  CommOptions options = test_options();
  options.backend = Backend::nccl;
  try {
    ProcessGroup::create_world(MPI_COMM_WORLD, 0, options);
    FAIL() << "backend nccl accepted without a device";
  } catch (const CommError& e) {
    EXPECT_EQ(e.code(), ErrorCode::failed_precondition);
    EXPECT_NE(std::string(e.what()).find("backend nccl was requested, but rank 0 has no CUDA device"),
              std::string::npos)
        << e.what();
  }
}

// ------------------------------------------------- with one GPU per rank --

class NcclOnDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    const int devices = cuda_device_count();
    int enough = devices >= testing::world_size() ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &enough, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!enough) GTEST_SKIP() << "needs one CUDA device per rank (NCCL cannot share one GPU between ranks)";
    rank_ = testing::world_rank();
    size_ = testing::world_size();
    device_ = rank_ % devices;
    group_ = ProcessGroup::create_world(MPI_COMM_WORLD, rank_, test_options(10000));
  }
  void TearDown() override {
    for (void* p : allocations_) cuda::free(p);
  }

  Buffer device_buffer(const std::vector<float>& host) {
    void* p = cuda::alloc(device_, host.size() * sizeof(float));
    allocations_.push_back(p);
    cuda::copy_to_device(p, host.data(), host.size() * sizeof(float));
    return Buffer{p, static_cast<int64_t>(host.size()), DType::f32, true, device_};
  }
  std::vector<float> read(const Buffer& b) {
    std::vector<float> host(static_cast<size_t>(b.count));
    cuda::copy_to_host(host.data(), b.data, host.size() * sizeof(float));
    return host;
  }

  int rank_ = 0;
  int size_ = 1;
  int device_ = 0;
  std::unique_ptr<ProcessGroup> group_;
  std::vector<void*> allocations_;
};

TEST_F(NcclOnDevice, Collectives) {
  const int n = size_;
  Buffer x = device_buffer(std::vector<float>(1001, static_cast<float>(rank_ + 1)));
  ASSERT_TRUE(group_->all_reduce(x, ReduceOp::sum).ok());
  EXPECT_EQ(read(x)[1000], static_cast<float>(n * (n + 1) / 2));

  Buffer y = device_buffer(std::vector<float>(8, static_cast<float>(rank_)));
  ASSERT_TRUE(group_->all_reduce_async(y, y, ReduceOp::avg)->wait().ok());
  EXPECT_FLOAT_EQ(read(y)[0], static_cast<float>(n - 1) / 2.0f);

  Buffer mine = device_buffer(std::vector<float>(3, static_cast<float>(rank_)));
  Buffer all = device_buffer(std::vector<float>(3 * n, -1.0f));
  ASSERT_TRUE(group_->all_gather(mine, all).ok());
  EXPECT_EQ(read(all)[3 * (n - 1)], static_cast<float>(n - 1));

  Buffer full = device_buffer(std::vector<float>(2 * n, 1.0f));
  Buffer part = device_buffer(std::vector<float>(2, 0.0f));
  ASSERT_TRUE(group_->reduce_scatter(full, part, ReduceOp::sum).ok());
  EXPECT_EQ(read(part)[1], static_cast<float>(n));
  // In place: the output is this rank's chunk of the input (ncclReduceScatter's
  // recvbuff == sendbuff + rank * recvcount).
  std::vector<float> values(2 * n);
  for (int i = 0; i < 2 * n; ++i) values[i] = static_cast<float>(i + rank_);
  Buffer whole = device_buffer(values);
  const Buffer own{static_cast<float*>(whole.data) + 2 * rank_, 2, DType::f32, true, device_};
  ASSERT_TRUE(group_->reduce_scatter(whole, own, ReduceOp::sum).ok());
  EXPECT_EQ(read(own)[1], static_cast<float>(n * (2 * rank_ + 1) + n * (n - 1) / 2));

  Buffer b = device_buffer(std::vector<float>(5, rank_ == 0 ? 9.0f : 0.0f));
  ASSERT_TRUE(group_->broadcast(b, 0).ok());
  EXPECT_EQ(read(b)[4], 9.0f);

  std::vector<float> send_host(n);
  for (int j = 0; j < n; ++j) send_host[j] = static_cast<float>(rank_ * 10 + j);
  Buffer send = device_buffer(send_host);
  Buffer recv = device_buffer(std::vector<float>(n, -1.0f));
  ASSERT_TRUE(group_->all_to_all(send, recv).ok());
  const std::vector<float> got = read(recv);
  for (int i = 0; i < n; ++i) EXPECT_EQ(got[i], static_cast<float>(i * 10 + rank_));

  Buffer out = device_buffer(std::vector<float>(4, static_cast<float>(rank_)));
  Buffer in = device_buffer(std::vector<float>(4, -1.0f));
  const P2POp ring[] = {{P2POp::Kind::send, out, (rank_ + 1) % n, 0},
                        {P2POp::Kind::recv, in, (rank_ + n - 1) % n, 0}};
  ASSERT_TRUE(group_->batch_p2p(ring).ok());
  EXPECT_EQ(read(in)[0], static_cast<float>((rank_ + n - 1) % n));
  ASSERT_TRUE(group_->barrier().ok());
}

TEST_F(NcclOnDevice, SkippedCollectiveTimesOutAndAborts) {
  if (size_ < 2) GTEST_SKIP() << "needs a peer to skip";
  Status error;
  Communicator* nccl = group_->nccl(&error);
  ASSERT_NE(nccl, nullptr) << error.message;
  Buffer x = device_buffer(std::vector<float>(16, 1.0f));
  if (rank_ != size_ - 1) {
    const Status s = nccl->all_reduce(x, ReduceOp::sum, {1500, "skipped"});
    EXPECT_EQ(s.code, ErrorCode::timeout) << s.message;
    EXPECT_NE(s.message.find("all_reduce #1 'skipped'"), std::string::npos) << s.message;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace accel::comm
