// Every collective of the MPI backend x every dtype x synchronous and
// asynchronous use, at whatever world size mpirun gave (the suite runs at 1,
// 2, 3 and 4 ranks): counts of 0, 1 and odd lengths, in place and out of
// place, every root. Inputs are chosen so that every partial sum is exact in
// every dtype (comm_test_support.h), so results are compared bit for bit
// with a reference built the way the backend rounds — including avg's
// division, in fp32 for the low-precision formats.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <ostream>
#include <thread>
#include <tuple>
#include <vector>

#include "host/comm/link_bytes.h"
#include "host/comm/mpi_communicator.h"
#include "host/comm/ring_collectives.h"
#include "tests/comm/comm_test_support.h"

namespace accel::comm {

void PrintTo(DType dtype, std::ostream* os) { *os << dtype_name(dtype); }

namespace {

using testing::test_options;
using testing::test_value;
using testing::TypedBuffer;

enum class Mode { sync, async };

// Readable parameters in gtest's failure lines.
void PrintTo(Mode mode, std::ostream* os) { *os << (mode == Mode::sync ? "sync" : "async"); }

const DType kAllDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,    DType::i8,
                            DType::u8,  DType::i32, DType::i64, DType::f8_e4m3, DType::f8_e5m2};
const ReduceOp kAllOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min};

// op over ranks of test_value(dtype, r, i), then (avg) the division the way
// the backend does it: in the element type, fp32 for the narrow floats.
double reduce_reference(DType dtype, ReduceOp op, int size, int64_t i) {
  double acc = test_value(dtype, 0, i);
  for (int r = 1; r < size; ++r) {
    const double v = test_value(dtype, r, i);
    if (op == ReduceOp::max)
      acc = std::max(acc, v);
    else if (op == ReduceOp::min)
      acc = std::min(acc, v);
    else
      acc += v;
  }
  if (op != ReduceOp::avg) return acc;
  if (dtype == DType::f64) return acc / size;
  return static_cast<float>(acc) / static_cast<float>(size);
}

// The first differing element, for a readable failure.
std::string first_difference(const TypedBuffer& got, const TypedBuffer& want) {
  for (int64_t i = 0; i < want.count(); ++i) {
    const size_t w = dtype_size(want.dtype);
    if (std::memcmp(got.bytes.data() + i * w, want.bytes.data() + i * w, w) != 0) {
      return "element " + std::to_string(i) + ": got " + std::to_string(got.get(i)) + ", want " +
             std::to_string(want.get(i));
    }
  }
  return "";
}

#define EXPECT_SAME_BYTES(got, want) EXPECT_EQ(first_difference(got, want), "")

class Collectives : public ::testing::TestWithParam<std::tuple<DType, Mode>> {
 protected:
  void SetUp() override {
    comm_ = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, "world", test_options());
    CommOptions ring_always = test_options();
    ring_always.ring_all_reduce_min_bytes = 0;
    ring_always.ring_reduce_scatter_min_bytes = 0;
    ring_always.ring_all_gather_min_bytes = 0;
    ring_always.ring_all_gather_max_bytes = SIZE_MAX;
    ring_always.ring_all_gather_max_ranks = std::numeric_limits<int>::max();
    ring_always.ring_segment_bytes = 24;  // many segments, the last one short
    ring_ = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, "world_ring", ring_always);
    rank_ = comm_->rank();
    size_ = comm_->size();
  }
  DType dtype() const { return std::get<0>(GetParam()); }

  // Synchronous: wait(); asynchronous: poll test() the way overlapping code does.
  Status finish(const std::shared_ptr<Work>& work) {
    if (std::get<1>(GetParam()) == Mode::sync) return work->wait();
    while (!work->test()) std::this_thread::yield();
    return work->status();
  }

  TypedBuffer input(int64_t count, int rank, int64_t first = 0) {
    TypedBuffer b(dtype(), count);
    for (int64_t i = 0; i < count; ++i) b.set(i, test_value(dtype(), rank, first + i));
    return b;
  }

  std::unique_ptr<MpiCommunicator> comm_;
  // The same, with every all_reduce of at least `size` elements, every
  // all_gather and every reduce_scatter on the ring.
  std::unique_ptr<MpiCommunicator> ring_;
  int rank_ = 0;
  int size_ = 1;
};

// Both implementations: MPI_Iallreduce, and the ring (ring_all_reduce.h)
// with chunks of unequal length (1001 and 9 do not divide by 2, 3 or 4)
// moving in segments of 24 bytes (3 to 24 elements).
TEST_P(Collectives, AllReduce) {
  for (MpiCommunicator* comm : {comm_.get(), ring_.get()}) {
    for (ReduceOp op : kAllOps) {
      for (int64_t count : {0, 1, 7, 9, 1001}) {
        for (bool in_place : {false, true}) {
          SCOPED_TRACE(std::string(comm == ring_.get() ? "ring " : "") + reduce_op_name(op) + " count " +
                       std::to_string(count) + (in_place ? " in place" : ""));
          TypedBuffer in = input(count, rank_);
          TypedBuffer out(dtype(), count);
          TypedBuffer& result = in_place ? in : out;
          const Status s = finish(comm->all_reduce_async(in.view(), result.view(), op, {0, "ar"}));
          if (op == ReduceOp::avg && dtype_is_integer(dtype())) {
            EXPECT_EQ(s.code, ErrorCode::unsupported) << s.message;
            EXPECT_NE(s.message.find("avg of integer dtype"), std::string::npos) << s.message;
            continue;
          }
          ASSERT_TRUE(s.ok()) << s.message;
          TypedBuffer want(dtype(), count);
          for (int64_t i = 0; i < count; ++i) want.set(i, reduce_reference(dtype(), op, size_, i));
          EXPECT_SAME_BYTES(result, want);
        }
      }
    }
  }
}

// The hierarchical all_reduce (three rings) on 4 ranks given as 2 nodes x 2,
// once with nodes of consecutive ranks and once interleaved (node rings and
// the ring across nodes then pair different ranks), in place and not, every
// op, chunks of unequal length in segments of 24 bytes: the same bits as the
// reference. At other world sizes no even split into nodes of >= 2 exists.
TEST_P(Collectives, HierarchicalAllReduce) {
  if (size_ != 4) GTEST_SKIP() << "needs 4 ranks (2 nodes x 2)";
  for (const std::vector<int>& nodes : {std::vector<int>{0, 0, 1, 1}, std::vector<int>{0, 1, 0, 1}}) {
    CommOptions options = test_options();
    options.ring_all_reduce_min_bytes = 0;
    options.ring_segment_bytes = 24;
    options.world_nodes = std::make_shared<const std::vector<int>>(nodes);
    MpiCommunicator comm(MPI_COMM_WORLD, "world_2x2", options);
    for (ReduceOp op : kAllOps) {
      if (op == ReduceOp::avg && dtype_is_integer(dtype())) continue;  // AllReduce covers the error
      for (int64_t count : {4, 9, 1001}) {
        for (bool in_place : {false, true}) {
          SCOPED_TRACE(std::string(nodes[1] == 0 ? "blocked " : "interleaved ") + reduce_op_name(op) +
                       " count " + std::to_string(count) + (in_place ? " in place" : ""));
          TypedBuffer in = input(count, rank_);
          TypedBuffer out(dtype(), count);
          TypedBuffer& result = in_place ? in : out;
          const Status s = finish(comm.all_reduce_async(in.view(), result.view(), op, {0, "har"}));
          ASSERT_TRUE(s.ok()) << s.message;
          TypedBuffer want(dtype(), count);
          for (int64_t i = 0; i < count; ++i) want.set(i, reduce_reference(dtype(), op, size_, i));
          EXPECT_SAME_BYTES(result, want);
        }
      }
    }
  }
}

// What each rank sends inside and across nodes (link_bytes.h), against the
// formulas: on 2 nodes x 2, the flat ring sends 2(n-1)/n x S to its next
// rank (across nodes from ranks 1 and 3, inside from 0 and 2); the
// hierarchical one sends S inside the node (reduce-scatter and all-gather,
// (l-1)/l x S each) and 2(m-1)/m x S/l = S/2 across.
TEST_P(Collectives, BytesSentByLink) {
  if (size_ != 4 || std::get<1>(GetParam()) == Mode::async || dtype() != DType::f32)
    GTEST_SKIP() << "one case: 4 ranks, f32";
  const int64_t count = 4096;
  const int64_t bytes = count * 4;
  for (bool hierarchical : {false, true}) {
    SCOPED_TRACE(hierarchical ? "hierarchical" : "flat");
    CommOptions options = test_options();
    options.world_nodes = std::make_shared<const std::vector<int>>(std::vector<int>{0, 0, 1, 1});
    options.hierarchical_all_reduce = hierarchical;
    options.ring_all_reduce_min_bytes = 1024;
    MpiCommunicator comm(MPI_COMM_WORLD, "world_2x2_bytes", options);
    TypedBuffer buffer = input(count, rank_);
    const LinkBytes before = link_bytes_sent();
    ASSERT_TRUE(comm.all_reduce(buffer.view(), ReduceOp::sum).ok());
    const LinkBytes after = link_bytes_sent();
    const int64_t intra = after.intra_node - before.intra_node, inter = after.inter_node - before.inter_node;
    if (hierarchical) {
      EXPECT_EQ(intra, bytes);
      EXPECT_EQ(inter, bytes / 2);
    } else {
      const bool crosses = rank_ == 1 || rank_ == 3;
      EXPECT_EQ(crosses ? inter : intra, bytes * 3 / 2);
      EXPECT_EQ(crosses ? intra : inter, 0);
    }
    EXPECT_EQ(after.mpi_collectives, before.mpi_collectives);
    // A small all_reduce goes to MPI_Iallreduce: its payload counts there.
    TypedBuffer one = input(1, rank_);
    ASSERT_TRUE(comm.all_reduce(one.view(), ReduceOp::sum).ok());
    EXPECT_EQ(link_bytes_sent().mpi_collectives - after.mpi_collectives, 4);
  }
}

// Both implementations (MPI_Iallgather and the ring), each in place and not.
TEST_P(Collectives, AllGather) {
  for (MpiCommunicator* comm : {comm_.get(), ring_.get()}) {
    for (int64_t count : {0, 1, 7, 333}) {
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(std::string(comm == ring_.get() ? "ring " : "") + "count " + std::to_string(count) +
                     (in_place ? " in place" : ""));
        TypedBuffer out(dtype(), count * size_);
        TypedBuffer in = input(count, rank_);
        Buffer send = in.view();
        if (in_place && count > 0) {
          std::memcpy(out.bytes.data() + rank_ * in.bytes.size(), in.bytes.data(), in.bytes.size());
          send = out.view(rank_ * count, count);
        }
        const Status s = finish(comm->all_gather_async(send, out.view()));
        ASSERT_TRUE(s.ok()) << s.message;
        TypedBuffer want(dtype(), count * size_);
        for (int r = 0; r < size_; ++r) {
          for (int64_t i = 0; i < count; ++i) want.set(r * count + i, test_value(dtype(), r, i));
        }
        EXPECT_SAME_BYTES(out, want);
      }
    }
  }
}

// Both implementations (MPI_Ireduce_scatter_block and the ring: one step
// at 2 ranks, accumulators alternating from 3), each in place (the output
// is this rank's chunk of the input: MPI_IN_PLACE leaves the result at
// chunk 0, moved from there; the ring writes it over the chunk) and not.
TEST_P(Collectives, ReduceScatter) {
  for (MpiCommunicator* comm : {comm_.get(), ring_.get()}) {
    for (ReduceOp op : kAllOps) {
      if (op == ReduceOp::avg && dtype_is_integer(dtype())) continue;  // AllReduce covers the error
      for (int64_t chunk : {1, 7, 333}) {
        for (bool in_place : {false, true}) {
          SCOPED_TRACE(std::string(comm == ring_.get() ? "ring " : "") + reduce_op_name(op) + " chunk " +
                       std::to_string(chunk) + (in_place ? " in place" : ""));
          TypedBuffer in = input(chunk * size_, rank_);
          TypedBuffer out(dtype(), chunk);
          Buffer result = in_place ? in.view(rank_ * chunk, chunk) : out.view();
          const Status s = finish(comm->reduce_scatter_async(in.view(), result, op));
          ASSERT_TRUE(s.ok()) << s.message;
          TypedBuffer got(dtype(), chunk);
          std::memcpy(got.bytes.data(), result.data, got.bytes.size());
          TypedBuffer want(dtype(), chunk);
          for (int64_t i = 0; i < chunk; ++i)
            want.set(i, reduce_reference(dtype(), op, size_, rank_ * chunk + i));
          EXPECT_SAME_BYTES(got, want);
        }
      }
    }
  }
  // Sizes that do not divide are rejected, never padded silently.
  TypedBuffer in = input(3 * size_ + 1, rank_);
  TypedBuffer out(dtype(), 3);
  const Status s = finish(comm_->reduce_scatter_async(in.view(), out.view(), ReduceOp::sum));
  EXPECT_EQ(s.code, ErrorCode::invalid_argument);
  EXPECT_NE(s.message.find("needs group size"), std::string::npos) << s.message;
  // An output inside the input but not at this rank's chunk is refused
  // before anything moves (every rank's is, so none waits on a peer).
  if (size_ > 1) {
    TypedBuffer whole = input(3 * size_, rank_);
    const int64_t other = (rank_ + 1) % size_;
    const Status o = finish(comm_->reduce_scatter_async(whole.view(), whole.view(other * 3, 3), ReduceOp::sum));
    EXPECT_EQ(o.code, ErrorCode::invalid_argument);
    EXPECT_NE(o.message.find("not at this rank's chunk"), std::string::npos) << o.message;
    EXPECT_SAME_BYTES(whole, input(3 * size_, rank_));
  }
}

TEST_P(Collectives, BroadcastFromEveryRoot) {
  for (int root = 0; root < size_; ++root) {
    for (int64_t count : {0, 1, 1001}) {
      SCOPED_TRACE("root " + std::to_string(root) + " count " + std::to_string(count));
      TypedBuffer buffer = rank_ == root ? input(count, root) : TypedBuffer(dtype(), count);
      const Status s = finish(comm_->broadcast_async(buffer.view(), root));
      ASSERT_TRUE(s.ok()) << s.message;
      EXPECT_SAME_BYTES(buffer, input(count, root));
    }
  }
}

TEST_P(Collectives, AllToAll) {
  for (int64_t chunk : {1, 5}) {
    for (bool in_place : {false, true}) {
      SCOPED_TRACE("chunk " + std::to_string(chunk) + (in_place ? " in place" : ""));
      TypedBuffer in = input(chunk * size_, rank_);
      TypedBuffer out(dtype(), chunk * size_);
      TypedBuffer& result = in_place ? in : out;
      const Status s = finish(comm_->all_to_all_async(in.view(), result.view()));
      ASSERT_TRUE(s.ok()) << s.message;
      // Chunk `rank_` of rank i's input lands in chunk i here.
      TypedBuffer want(dtype(), chunk * size_);
      for (int i = 0; i < size_; ++i) {
        for (int64_t k = 0; k < chunk; ++k)
          want.set(i * chunk + k, test_value(dtype(), i, rank_ * chunk + k));
      }
      EXPECT_SAME_BYTES(result, want);
    }
  }
}

// Uneven chunks: rank i sends (i + j) % 3 elements to rank j (zero
// counts included; rank i's k-th element to j is test_value(i, 100 j + k)),
// and a run with one large chunk (rendezvous size) to every peer.
TEST_P(Collectives, AllToAllV) {
  for (int64_t scale : {1, 40000}) {
    SCOPED_TRACE("scale " + std::to_string(scale));
    const auto count = [&](int from, int to) { return ((from + to) % 3) * scale; };
    std::vector<int64_t> send_counts, recv_counts;
    int64_t sends = 0, receives = 0;
    for (int j = 0; j < size_; ++j) {
      send_counts.push_back(count(rank_, j));
      recv_counts.push_back(count(j, rank_));
      sends += send_counts.back();
      receives += recv_counts.back();
    }
    TypedBuffer in(dtype(), sends);
    for (int j = 0, at = 0; j < size_; ++j) {
      for (int64_t k = 0; k < send_counts[static_cast<size_t>(j)]; ++k) in.set(at++, test_value(dtype(), rank_, 100 * j + k));
    }
    TypedBuffer out(dtype(), receives);
    const Status s = finish(comm_->all_to_all_v_async(in.view(), send_counts, out.view(), recv_counts, {0, "a2av"}));
    ASSERT_TRUE(s.ok()) << s.message;
    TypedBuffer want(dtype(), receives);
    for (int i = 0, at = 0; i < size_; ++i) {
      for (int64_t k = 0; k < recv_counts[static_cast<size_t>(i)]; ++k) want.set(at++, test_value(dtype(), i, 100 * rank_ + k));
    }
    EXPECT_SAME_BYTES(out, want);
  }
}

// Counts that cannot be right are refused before anything is sent, on the
// rank that holds them, in one line each.
TEST_P(Collectives, AllToAllVRefusesBadCounts) {
  if (std::get<1>(GetParam()) == Mode::async || dtype() != DType::f32) GTEST_SKIP() << "one case";
  TypedBuffer in = input(2 * size_, rank_);
  TypedBuffer out(dtype(), 2 * size_);
  const std::vector<int64_t> twos(static_cast<size_t>(size_), 2);
  const auto refused = [&](std::vector<int64_t> send, std::vector<int64_t> recv, const Buffer& output,
                           const char* words) {
    const Status s = comm_->all_to_all_v(in.view(), send, output, recv);
    EXPECT_EQ(s.code, ErrorCode::invalid_argument) << s.message;
    EXPECT_NE(s.message.find(words), std::string::npos) << s.message;
  };
  refused(std::vector<int64_t>(static_cast<size_t>(size_) + 1, 0), twos, out.view(), "send_counts has");
  std::vector<int64_t> negative = twos;
  negative[0] = -1;  // found before the sum is
  refused(negative, twos, out.view(), "is -1");
  std::vector<int64_t> short_sum = twos;
  short_sum[0] = 1;
  refused(twos, short_sum, out.view(), "recv_counts add up to");
  refused(twos, twos, in.view(), "overlaps");
}

// A receive count that disagrees with the sender's fails the receiver's
// operation naming the peer (rank 1 expects one element more from rank 0
// than rank 0 sends it); a communicator of its own, since it fails.
TEST_P(Collectives, AllToAllVCountsThatDisagreeFailTheReceiver) {
  if (size_ < 2 || std::get<1>(GetParam()) == Mode::async || dtype() != DType::f32) GTEST_SKIP() << "one case";
  MpiCommunicator comm(MPI_COMM_WORLD, "a2av_mismatch", test_options());
  std::vector<int64_t> send_counts(static_cast<size_t>(size_), 1), recv_counts(static_cast<size_t>(size_), 1);
  if (rank_ == 1) recv_counts[0] = 2;
  int64_t receives = 0;
  for (int64_t c : recv_counts) receives += c;
  TypedBuffer in = input(size_, rank_);
  TypedBuffer out(dtype(), receives);
  const Status s = comm.all_to_all_v(in.view(), send_counts, out.view(), recv_counts);
  if (rank_ == 1) {
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message.find("from peer 0, expected 2"), std::string::npos) << s.message;
  } else {
    EXPECT_TRUE(s.ok()) << s.message;
  }
}

TEST_P(Collectives, SendRecvRing) {
  const int next = (rank_ + 1) % size_;
  const int prev = (rank_ + size_ - 1) % size_;
  for (int64_t count : {7, 100000}) {  // eager and rendezvous sizes
    SCOPED_TRACE("count " + std::to_string(count));
    TypedBuffer out = input(count, rank_);
    TypedBuffer in(dtype(), count);
    if (std::get<1>(GetParam()) == Mode::async) {
      auto recv = comm_->recv_async(in.view(), prev, 5);
      auto send = comm_->send_async(out.view(), next, 5);
      ASSERT_TRUE(finish(send).ok()) << send->status().message;
      ASSERT_TRUE(finish(recv).ok()) << recv->status().message;
    } else {
      // Everyone sending first would deadlock a ring: a batch issues both.
      const P2POp ops[] = {{P2POp::Kind::send, out.view(), next, 5}, {P2POp::Kind::recv, in.view(), prev, 5}};
      const Status s = comm_->batch_p2p(ops);
      ASSERT_TRUE(s.ok()) << s.message;
    }
    EXPECT_SAME_BYTES(in, input(count, prev));
  }
}

TEST_P(Collectives, Barrier) {
  EXPECT_TRUE(finish(comm_->barrier_async({0, "b"})).ok());
  EXPECT_FALSE(comm_->failure().has_value());
}

// The default policy: the ring on 2 ranks from 64 KiB to 4 MiB of output
// (bounds included), MPI_Iallgather otherwise and on larger groups.
TEST(AllGatherPolicy, TheRingServesTwoRanksFrom64KiBTo4MiB) {
  const CommOptions defaults;
  EXPECT_FALSE(all_gather_uses_ring(defaults, 2, 64 * 1024 - 1));
  EXPECT_TRUE(all_gather_uses_ring(defaults, 2, 64 * 1024));
  EXPECT_TRUE(all_gather_uses_ring(defaults, 2, 1024 * 1024));
  EXPECT_TRUE(all_gather_uses_ring(defaults, 2, 4 * 1024 * 1024));
  EXPECT_FALSE(all_gather_uses_ring(defaults, 2, 4 * 1024 * 1024 + 1));
  EXPECT_FALSE(all_gather_uses_ring(defaults, 4, 1024 * 1024));
  EXPECT_FALSE(all_gather_uses_ring(defaults, 1, 1024 * 1024));  // nothing to exchange
}

// A 2-rank all_gather inside the default ring window (one 128 KiB exchange,
// sent from the input while the own chunk is copied), out of place and in
// place, gives every rank every chunk.
TEST(AllGatherPolicy, TheDefaultRingWindowGathersEveryChunk) {
  MpiCommunicator comm(MPI_COMM_WORLD, "world_defaults", test_options());
  const int64_t count = 32 * 1024;  // f32: 128 KiB per rank
  if (!all_gather_uses_ring(test_options(), comm.size(), static_cast<size_t>(count * comm.size()) * 4)) {
    GTEST_SKIP() << "the default window serves 2-rank groups only";
  }
  for (bool in_place : {false, true}) {
    std::vector<float> out(static_cast<size_t>(count * comm.size()), -1.0f);
    std::vector<float> in(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) in[static_cast<size_t>(i)] = static_cast<float>(comm.rank() * count + i);
    float* own = out.data() + comm.rank() * count;
    if (in_place) std::memcpy(own, in.data(), in.size() * sizeof(float));
    const Buffer send{in_place ? own : in.data(), count, DType::f32, false, 0};
    const Status s = comm.all_gather(send, Buffer{out.data(), count * comm.size(), DType::f32, false, 0});
    ASSERT_TRUE(s.ok()) << s.message;
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], static_cast<float>(i)) << "element " << i;
  }
}

// The rings' scratch pool keeps a few buffers for reuse, never the largest
// ones: what it holds idle stays within kMaxIdleBytes and kMaxIdleBuffers,
// and a request is served by the smallest idle buffer that fits.
TEST(ScratchPoolBounds, IdleBuffersStayWithinTheByteAndCountBounds) {
  const int64_t before = comm_scratch_bytes();
  {
  ScratchPool pool;
  constexpr size_t MiB = size_t{1} << 20;
  std::vector<uint8_t> big = pool.acquire(ScratchPool::kMaxIdleBytes + 1);
  pool.release(std::move(big));
  EXPECT_EQ(pool.idle_bytes(), 0u);  // larger than the bound: freed
  std::vector<std::vector<uint8_t>> held;
  for (size_t mib : {8, 16, 24, 32}) held.push_back(pool.acquire(mib * MiB));
  for (auto& b : held) pool.release(std::move(b));
  EXPECT_EQ(pool.idle_bytes(), (8 + 16 + 24) * MiB);  // the 32 MiB one would pass 64 MiB
  const std::vector<uint8_t> reused = pool.acquire(10 * MiB);
  EXPECT_EQ(reused.size(), 16 * MiB);  // the smallest that fits
  EXPECT_EQ(pool.idle_bytes(), (8 + 24) * MiB);
  std::vector<std::vector<uint8_t>> small;
  for (int i = 0; i < 8; ++i) small.push_back(pool.acquire(MiB));
  for (auto& b : small) pool.release(std::move(b));
  EXPECT_EQ(pool.idle_bytes(), (8 + 24 + 2) * MiB);  // at most kMaxIdleBuffers (4) kept
  // The process-wide figure the memory ledger reports: idle plus in use.
  EXPECT_EQ(comm_scratch_bytes() - before, static_cast<int64_t>(pool.idle_bytes() + reused.size()));
  pool.release(std::vector<uint8_t>(reused));
  }
  EXPECT_EQ(comm_scratch_bytes(), before);  // all freed with the pool
}

// A reducing ring step keeps at most ring_receive_window_segments segment
// receives posted, so its receive scratch is that many segments however
// long the chunk (it used to be a chunk per ring in flight); the result is
// unchanged. Here a window of one 24-byte segment against 4,000-byte chunks.
TEST(RingScratch, ReceiveScratchIsTheWindowNotTheChunk) {
  CommOptions options = test_options();
  options.ring_all_reduce_min_bytes = 0;
  options.ring_reduce_scatter_min_bytes = 0;
  options.ring_segment_bytes = 24;
  options.ring_receive_window_segments = 1;
  const int64_t before = comm_scratch_bytes();
  {
    MpiCommunicator ring(MPI_COMM_WORLD, "scratch_ring", options);
    const int n = ring.size();
    if (n < 2) GTEST_SKIP() << "no ring on one rank";
    const int64_t chunk = 1000;  // f32 elements, 4,000 bytes
    std::vector<float> data(static_cast<size_t>(chunk * n));
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>((ring.rank() + 1) * (i % 7));
    const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
    ASSERT_TRUE(ring.all_reduce(Buffer{data.data(), chunk * n, DType::f32, false, 0},
                                Buffer{data.data(), chunk * n, DType::f32, false, 0}, ReduceOp::sum)
                    .ok());
    for (size_t i = 0; i < data.size(); ++i) ASSERT_EQ(data[i], ranks_sum * static_cast<float>(i % 7)) << i;
    EXPECT_EQ(comm_scratch_bytes() - before, 24);  // the one slot, idle in the pool now

    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>((ring.rank() + 1) * (i % 5));
    std::vector<float> out(static_cast<size_t>(chunk));
    ASSERT_TRUE(ring.reduce_scatter(Buffer{data.data(), chunk * n, DType::f32, false, 0},
                                    Buffer{out.data(), chunk, DType::f32, false, 0}, ReduceOp::sum)
                    .ok());
    for (int64_t i = 0; i < chunk; ++i) {
      ASSERT_EQ(out[static_cast<size_t>(i)], ranks_sum * static_cast<float>((ring.rank() * chunk + i) % 5)) << i;
    }
    // From 3 ranks a partial travels on: two chunk accumulators besides the slot.
    EXPECT_EQ(comm_scratch_bytes() - before, n > 2 ? 24 + (24 + 2 * 4000) : 24);
  }
  EXPECT_EQ(comm_scratch_bytes(), before);
}

std::string param_name(const ::testing::TestParamInfo<std::tuple<DType, Mode>>& info) {
  return std::string(dtype_name(std::get<0>(info.param))) +
         (std::get<1>(info.param) == Mode::sync ? "_sync" : "_async");
}

INSTANTIATE_TEST_SUITE_P(EveryDType, Collectives,
                         ::testing::Combine(::testing::ValuesIn(kAllDTypes),
                                            ::testing::Values(Mode::sync, Mode::async)),
                         param_name);

}  // namespace
}  // namespace accel::comm
