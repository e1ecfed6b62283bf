// Expert parallelism in one process (host/model/expert_parallel.h, moe.h):
// every rank of an expert group is a thread exchanging through in-memory
// mailboxes, holding its own tokens, the whole router and its E / P experts.
// Each rank's output and its gradients at the tokens and the router must
// equal moe_mlp with every expert in one process on the same tokens; each
// expert's weight gradient, the sum over every rank's tokens that chose it.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "host/model/moe.h"

namespace accel::model {
namespace {

// A layer's weights without a shared expert (MoeWeights' other members empty).
MoeWeights experts_of(at::Tensor router, at::Tensor gate, at::Tensor up, at::Tensor down) {
  MoeWeights w;
  w.router = std::move(router);
  w.gate = std::move(gate);
  w.up = std::move(up);
  w.down = std::move(down);
  return w;
}

// FIFO mailboxes keyed (to, from), as MPI orders one sender's messages.
class Fabric {
 public:
  void post(int64_t to, int64_t from, at::Tensor t) {
    std::lock_guard<std::mutex> lock(mutex_);
    boxes_[{to, from}].push_back(t.clone());
    ready_.notify_all();
  }
  at::Tensor take(int64_t to, int64_t from) {
    std::unique_lock<std::mutex> lock(mutex_);
    auto& box = boxes_[{to, from}];
    ready_.wait(lock, [&] { return !box.empty(); });
    at::Tensor t = box.front();
    box.pop_front();
    return t;
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::map<std::pair<int64_t, int64_t>, std::deque<at::Tensor>> boxes_;
};

ExpertGroup wired(Fabric& fabric, int64_t size, int64_t rank) {
  ExpertGroup g;
  g.size = size;
  g.rank = rank;
  g.all_to_all_v = [&fabric, size, rank](const at::Tensor& input, const std::vector<int64_t>& send,
                                         const std::vector<int64_t>& recv) {
    int64_t offset = 0;
    for (int64_t j = 0; j < size; ++j) {
      fabric.post(j, rank, input.narrow(0, offset, send[static_cast<size_t>(j)]));
      offset += send[static_cast<size_t>(j)];
    }
    std::vector<at::Tensor> got;
    for (int64_t i = 0; i < size; ++i) {
      got.push_back(fabric.take(rank, i));
      EXPECT_EQ(got.back().size(0), recv[static_cast<size_t>(i)]) << "rank " << rank << " from " << i;
    }
    return at::cat(got, 0);
  };
  return g;
}

// Within fp32's rounding of the summation order: 1e-5 relative to the values' size.
double off(const at::Tensor& got, const at::Tensor& want) {
  return (got - want).abs().max().item<double>() / (1.0 + want.abs().max().item<double>());
}

struct Case {
  int64_t ranks, experts, top_k;
  bool lopsided;  // the router sends every token to the first experts: some ranks receive nothing
};

class ExpertParallel : public ::testing::TestWithParam<Case> {};

TEST_P(ExpertParallel, EveryRankEqualsAllExpertsInOneProcess) {
  const Case c = GetParam();
  const int64_t h = 8, ffn = 6, local = c.experts / c.ranks;
  at::manual_seed(5);
  at::Tensor router = at::randn({c.experts, h});
  if (c.lopsided) router.narrow(0, 0, c.top_k).add_(50.0);
  const at::Tensor gate = at::randn({c.experts, ffn, h}) * 0.3, up = at::randn({c.experts, ffn, h}) * 0.3,
                   down = at::randn({c.experts, h, ffn}) * 0.3;
  std::vector<at::Tensor> tokens, upstream;
  for (int64_t r = 0; r < c.ranks; ++r) {
    tokens.push_back(at::randn({3 + 2 * r, h}) + (c.lopsided ? 1.0 : 0.0));
    upstream.push_back(at::randn({3 + 2 * r, h}));
  }
  MoeSettings settings;
  settings.experts = c.experts;
  settings.top_k = c.top_k;

  // One process, every expert: each rank's tokens in turn, the experts'
  // gradients summed over them, the router's and the tokens' kept apart.
  const at::Tensor all_gate = gate.clone().requires_grad_(), all_up = up.clone().requires_grad_(),
                   all_down = down.clone().requires_grad_();
  std::vector<at::Tensor> want_out, want_x_grad, want_router_grad;
  for (int64_t r = 0; r < c.ranks; ++r) {
    MoeWeights w = experts_of(router.clone().requires_grad_(), all_gate, all_up, all_down);
    const at::Tensor x = tokens[static_cast<size_t>(r)].clone().requires_grad_();
    const at::Tensor out = moe_mlp(x, w, settings);
    out.backward(upstream[static_cast<size_t>(r)]);
    want_out.push_back(out.detach());
    want_x_grad.push_back(x.grad());
    want_router_grad.push_back(w.router.grad());
  }

  Fabric fabric;
  std::vector<at::Tensor> out(c.ranks), x_grad(c.ranks), router_grad(c.ranks), gate_grad(c.ranks), up_grad(c.ranks),
      down_grad(c.ranks);
  std::vector<std::vector<int64_t>> per_expert(c.ranks);
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < c.ranks; ++r) {
    threads.emplace_back([&, r] {
      at::set_num_threads(1);
      const ExpertGroup group = wired(fabric, c.ranks, r);
      MoeWeights w = experts_of(router.clone().requires_grad_(), gate.narrow(0, r * local, local).clone().requires_grad_(),
                   up.narrow(0, r * local, local).clone().requires_grad_(),
                   down.narrow(0, r * local, local).clone().requires_grad_());
      const auto i = static_cast<size_t>(r);
      const at::Tensor x = tokens[i].clone().requires_grad_();
      MoeRouting routing;
      const at::Tensor y = moe_mlp(x, w, settings, &routing, &group);
      y.backward(upstream[i]);
      out[i] = y.detach();
      x_grad[i] = x.grad();
      router_grad[i] = w.router.grad();
      gate_grad[i] = w.gate.grad();
      up_grad[i] = w.up.grad();
      down_grad[i] = w.down.grad();
      per_expert[i] = routing.tokens_per_expert;
    });
  }
  for (std::thread& t : threads) t.join();

  for (int64_t r = 0; r < c.ranks; ++r) {
    const auto i = static_cast<size_t>(r);
    EXPECT_LE(off(out[i], want_out[i]), 1e-5) << "rank " << r;
    EXPECT_LE(off(x_grad[i], want_x_grad[i]), 1e-5) << "rank " << r;
    EXPECT_LE(off(router_grad[i], want_router_grad[i]), 1e-5) << "rank " << r;
    // A rank no token reached has no gradient at its experts (zero, or none).
    const auto same = [&](const at::Tensor& got, const at::Tensor& all) {
      const at::Tensor want = all.grad().narrow(0, r * local, local);
      return got.defined() ? off(got, want) : want.abs().max().item<double>();
    };
    EXPECT_LE(same(gate_grad[i], all_gate), 1e-5) << "rank " << r;
    EXPECT_LE(same(up_grad[i], all_up), 1e-5) << "rank " << r;
    EXPECT_LE(same(down_grad[i], all_down), 1e-5) << "rank " << r;
    // The counts are this rank's tokens' choices over all E experts.
    int64_t total = 0;
    for (int64_t n : per_expert[i]) total += n;
    EXPECT_EQ(total, tokens[i].size(0) * c.top_k);
  }
}

INSTANTIATE_TEST_SUITE_P(Groups, ExpertParallel,
                         ::testing::Values(Case{2, 4, 2, false}, Case{4, 8, 2, false}, Case{4, 4, 1, false},
                                           Case{2, 4, 2, true}, Case{4, 8, 2, true}));

TEST(ExpertParallelShapes, ExpertsThatDoNotSplitOverTheGroupAreRefused) {
  Fabric fabric;
  const ExpertGroup group = wired(fabric, 3, 0);
  MoeSettings settings;
  settings.experts = 4;
  settings.top_k = 2;
  MoeWeights w = experts_of(at::randn({4, 8}), at::randn({1, 6, 8}), at::randn({1, 6, 8}), at::randn({1, 8, 6}));
  EXPECT_THROW(moe_mlp(at::randn({3, 8}), w, settings, nullptr, &group), std::invalid_argument);
}

}  // namespace
}  // namespace accel::model
