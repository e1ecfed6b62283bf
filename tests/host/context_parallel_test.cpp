// Context parallelism in one process: the layout's positions, and
// context_attention of every rank of a ring (passed or all-gathered), an
// all-to-all group or both, run as threads exchanging through in-memory
// mailboxes, against causal attention over the whole sequence — outputs and
// the gradients at q, k and v (the ring's backward sends key/value
// gradients back to their owners, the all-gather's reduce-scatters them, so
// each rank's must equal the whole attention's at its positions).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

#include "host/model/attention_blocks.h"
#include "host/model/context_parallel.h"

namespace accel::model {
namespace {

ContextGroup layout(int64_t ring, int64_t a2a, int64_t rank) {
  ContextGroup g;
  g.ring_size = ring;
  g.a2a_size = a2a;
  g.size = ring * a2a;
  g.rank = rank;
  g.ring_rank = rank / a2a;
  g.a2a_rank = rank % a2a;
  return g;
}

std::vector<int64_t> positions_of(const ContextGroup& g, int64_t seq_len) {
  const at::Tensor p = g.positions(seq_len, at::kCPU);
  return {p.data_ptr<int64_t>(), p.data_ptr<int64_t>() + p.numel()};
}

TEST(ContextLayout, ARingHoldsOneEarlyAndOneLateChunkPerRank) {
  EXPECT_EQ(positions_of(layout(2, 1, 0), 8), (std::vector<int64_t>{0, 1, 6, 7}));
  EXPECT_EQ(positions_of(layout(2, 1, 1), 8), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(positions_of(layout(4, 1, 3), 8), (std::vector<int64_t>{3, 4}));
}

TEST(ContextLayout, AllToAllPiecesAreContiguousPartsOfTheRingRanksChunks) {
  EXPECT_EQ(positions_of(layout(1, 4, 2), 8), (std::vector<int64_t>{4, 5}));
  // Ring rank 0 of 2 holds [0, 4) and [12, 16); its two a2a ranks a piece each.
  EXPECT_EQ(positions_of(layout(2, 2, 0), 16), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(positions_of(layout(2, 2, 1), 16), (std::vector<int64_t>{12, 13, 14, 15}));
  EXPECT_EQ(positions_of(layout(2, 2, 3), 16), (std::vector<int64_t>{8, 9, 10, 11}));
}

TEST(ContextLayout, EveryPositionBelongsToExactlyOneRank) {
  for (auto [ring, a2a] : {std::pair<int64_t, int64_t>{2, 1}, {4, 1}, {1, 4}, {2, 2}, {3, 2}}) {
    std::vector<int> seen(24, 0);
    for (int64_t r = 0; r < ring * a2a; ++r) {
      for (int64_t p : positions_of(layout(ring, a2a, r), 24)) ++seen[static_cast<size_t>(p)];
    }
    for (int count : seen) EXPECT_EQ(count, 1) << "ring " << ring << " a2a " << a2a;
  }
}

TEST(ContextLayout, ASequenceTheLayoutCannotCutIsRefusedInOneLine) {
  EXPECT_NE(layout(2, 1, 0).layout_problem(6).find("does not split into the ring's 4 load-balanced chunks"),
            std::string::npos);
  EXPECT_NE(layout(1, 4, 0).layout_problem(6).find("does not split over 4 all-to-all ranks"), std::string::npos);
  EXPECT_EQ(layout(2, 2, 0).layout_problem(16), "");
  EXPECT_THROW(layout(2, 1, 0).positions(10, at::kCPU), std::invalid_argument);
}

TEST(AttentionBlocks, KeyBlocksMergedThroughTheirLogSumExpEqualTheWholeAttention) {
  at::manual_seed(3);
  const at::Tensor q = at::randn({2, 4, 6, 8}), k = at::randn({2, 2, 10, 8}), v = at::randn({2, 2, 10, 8});
  const at::Tensor whole = at::scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1));
  at::Tensor out, lse;
  for (auto [begin, length] : {std::pair<int64_t, int64_t>{0, 3}, {3, 4}, {7, 3}}) {
    merge_attention_block(out, lse, attention_block_forward(q, k.narrow(2, begin, length), v.narrow(2, begin, length),
                                                            /*causal=*/false));
  }
  EXPECT_LE((out - whole).abs().max().item<double>(), 1e-6);
}

// Mailboxes keyed (kind, to, from, tag): FIFO per key, as MPI orders the
// messages of one sender and tag.
class Fabric {
 public:
  void post(int kind, int64_t to, int64_t from, int tag, at::Tensor t) {
    std::lock_guard<std::mutex> lock(mutex_);
    boxes_[{kind, to, from, tag}].push_back(t.clone());
    ready_.notify_all();
  }
  at::Tensor take(int kind, int64_t to, int64_t from, int tag) {
    std::unique_lock<std::mutex> lock(mutex_);
    auto& box = boxes_[{kind, to, from, tag}];
    ready_.wait(lock, [&] { return !box.empty(); });
    at::Tensor t = box.front();
    box.pop_front();
    return t;
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::map<std::tuple<int, int64_t, int64_t, int>, std::deque<at::Tensor>> boxes_;
};

ContextGroup wired(Fabric& fabric, int64_t ring, int64_t a2a, int64_t rank, bool gather) {
  ContextGroup g = layout(ring, a2a, rank);
  // Global context ranks of this rank's ring and all-to-all peers.
  const int64_t base = g.ring_rank * a2a;
  g.all_to_all = [&fabric, g, base](const at::Tensor& input) {
    const auto chunks = input.chunk(g.a2a_size, 0);
    for (int64_t j = 0; j < g.a2a_size; ++j) fabric.post(0, base + j, g.rank, 0, chunks[static_cast<size_t>(j)]);
    std::vector<at::Tensor> got;
    for (int64_t i = 0; i < g.a2a_size; ++i) got.push_back(fabric.take(0, g.rank, base + i, 0));
    return at::cat(got, 0);
  };
  g.ring_pass = [&fabric, g](const at::Tensor& t, int tag) -> ContextGroup::Transfer {
    const int64_t next = (g.ring_rank + 1) % g.ring_size * g.a2a_size + g.a2a_rank;
    const int64_t prev = (g.ring_rank + g.ring_size - 1) % g.ring_size * g.a2a_size + g.a2a_rank;
    fabric.post(1, next, g.rank, tag, t);
    return [&fabric, g, prev, tag] { return fabric.take(1, g.rank, prev, tag); };
  };
  if (gather) {
    // The all-gather exchange: each ring rank's block to every ring rank
    // (itself included), and the reduce-scatter that is its adjoint.
    g.gather_ring = true;
    g.ring_pass = nullptr;  // a pass would throw: the gathers do it all
    const auto ring_peer = [g](int64_t s) { return s * g.a2a_size + g.a2a_rank; };
    g.ring_all_gather = [&fabric, g, ring_peer](const at::Tensor& block) {
      for (int64_t s = 0; s < g.ring_size; ++s) fabric.post(2, ring_peer(s), g.rank, 0, block);
      std::vector<at::Tensor> got;
      for (int64_t s = 0; s < g.ring_size; ++s) got.push_back(fabric.take(2, g.rank, ring_peer(s), 0));
      return at::stack(got);
    };
    g.ring_reduce_scatter = [&fabric, g, ring_peer](const at::Tensor& blocks) {
      for (int64_t s = 0; s < g.ring_size; ++s) fabric.post(3, ring_peer(s), g.rank, 0, blocks[s]);
      at::Tensor sum = at::zeros(blocks.sizes().slice(1), blocks.options());
      for (int64_t s = 0; s < g.ring_size; ++s) sum.add_(fabric.take(3, g.rank, ring_peer(s), 0));
      return sum;
    };
  }
  return g;
}

struct Shape {
  int64_t ring, a2a, kv_heads;
  bool gather = false;  // the ring's layout exchanged by all-gather (cp_comm_type all_gather)
};

class ContextAttention : public ::testing::TestWithParam<Shape> {};

TEST_P(ContextAttention, EveryRanksOutputAndGradientsEqualTheWholeSequences) {
  const Shape shape = GetParam();
  const int64_t B = 2, H = 4, T = 24, D = 8, C = shape.ring * shape.a2a;
  at::manual_seed(11);
  const at::Tensor q = at::randn({B, H, T, D}).requires_grad_(true);
  const at::Tensor k = at::randn({B, shape.kv_heads, T, D}).requires_grad_(true);
  const at::Tensor v = at::randn({B, shape.kv_heads, T, D}).requires_grad_(true);
  const at::Tensor weights = at::randn({B, H, T, D});
  const int64_t groups = H / shape.kv_heads;
  const at::Tensor whole = at::scaled_dot_product_attention(q, k.repeat_interleave(groups, 1),
                                                            v.repeat_interleave(groups, 1), std::nullopt, 0.0, true);
  (whole * weights).sum().backward();

  Fabric fabric;
  std::vector<ContextGroup> groups_of(static_cast<size_t>(C));
  for (int64_t r = 0; r < C; ++r) {
    groups_of[static_cast<size_t>(r)] = wired(fabric, shape.ring, shape.a2a, r, shape.gather);
  }
  std::vector<double> out_error(static_cast<size_t>(C)), grad_error(static_cast<size_t>(C));
  std::vector<std::thread> ranks;
  for (int64_t r = 0; r < C; ++r) {
    ranks.emplace_back([&, r] {
      const ContextGroup& g = groups_of[static_cast<size_t>(r)];
      const at::Tensor p = g.positions(T, at::kCPU);
      auto part = [&](const at::Tensor& t) { return t.detach().index_select(2, p).requires_grad_(true); };
      const at::Tensor lq = part(q), lk = part(k), lv = part(v);
      const at::Tensor y = context_attention(lq, lk, lv, g);
      (y * weights.index_select(2, p)).sum().backward();
      out_error[static_cast<size_t>(r)] = (y - whole.detach().index_select(2, p)).abs().max().item<double>();
      double worst = 0;
      for (auto [local, global] : {std::pair{lq, q}, {lk, k}, {lv, v}}) {
        worst = std::max(worst, (local.grad() - global.grad().index_select(2, p)).abs().max().item<double>());
      }
      grad_error[static_cast<size_t>(r)] = worst;
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int64_t r = 0; r < C; ++r) {
    EXPECT_LE(out_error[static_cast<size_t>(r)], 1e-5) << "rank " << r;
    EXPECT_LE(grad_error[static_cast<size_t>(r)], 1e-5) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(RingAllToAllAndBoth, ContextAttention,
                         ::testing::Values(Shape{2, 1, 4}, Shape{4, 1, 2}, Shape{3, 1, 1}, Shape{1, 2, 2},
                                           Shape{1, 4, 4}, Shape{2, 2, 2}, Shape{2, 1, 4, true},
                                           Shape{4, 1, 2, true}, Shape{3, 1, 1, true}),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return std::string(info.param.gather ? "gathered" : "ring") +
                                  std::to_string(info.param.ring) + "_a2a" + std::to_string(info.param.a2a) +
                                  "_kv" + std::to_string(info.param.kv_heads);
                         });

}  // namespace
}  // namespace accel::model
