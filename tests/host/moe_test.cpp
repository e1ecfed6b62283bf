// The mixture-of-experts MLP (host/model/moe.h) against a token-by-token
// reference written from transformers' definition, forward and backward;
// capacity dropping; the auxiliary losses against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>

#include "host/model/moe.h"

using namespace accel::model;

namespace {

MoeWeights random_weights(int64_t experts, int64_t h, int64_t ffn, int64_t shared_ffn, uint64_t seed) {
  at::manual_seed(seed);
  MoeWeights w;
  w.router = at::randn({experts, h}).requires_grad_();
  w.gate = (at::randn({experts, ffn, h}) * 0.3).requires_grad_();
  w.up = (at::randn({experts, ffn, h}) * 0.3).requires_grad_();
  w.down = (at::randn({experts, h, ffn}) * 0.3).requires_grad_();
  if (shared_ffn > 0) {
    w.shared_gate = (at::randn({shared_ffn, h}) * 0.3).requires_grad_();
    w.shared_up = (at::randn({shared_ffn, h}) * 0.3).requires_grad_();
    w.shared_down = (at::randn({h, shared_ffn}) * 0.3).requires_grad_();
    w.shared_expert_gate = at::randn({1, h}).requires_grad_();
  }
  return w;
}

at::Tensor swiglu_row(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& up, const at::Tensor& down) {
  return at::matmul(down, at::silu(at::matmul(gate, x)) * at::matmul(up, x));
}

// One token at a time: softmax, top-k, renormalise, the chosen experts'
// weighted outputs summed, the shared expert added (no capacity).
at::Tensor reference(const at::Tensor& x, const MoeWeights& w, const MoeSettings& s) {
  std::vector<at::Tensor> rows;
  for (int64_t t = 0; t < x.size(0); ++t) {
    const at::Tensor xt = x[t];
    const at::Tensor probs = at::softmax(at::matmul(w.router, xt), 0);
    at::Tensor top_weights, top_experts;
    std::tie(top_weights, top_experts) = probs.topk(s.top_k);
    if (s.normalize_top_k) top_weights = top_weights / top_weights.sum();
    at::Tensor out = at::zeros_like(xt);
    for (int64_t j = 0; j < s.top_k; ++j) {
      const int64_t e = top_experts[j].item<int64_t>();
      out = out + top_weights[j] * swiglu_row(xt, w.gate[e], w.up[e], w.down[e]);
    }
    if (w.shared_gate.defined()) {
      out = out + at::sigmoid(at::matmul(w.shared_expert_gate, xt)) *
                      swiglu_row(xt, w.shared_gate, w.shared_up, w.shared_down);
    }
    rows.push_back(out);
  }
  return at::stack(rows);
}

std::vector<at::Tensor> parameters(const MoeWeights& w) {
  std::vector<at::Tensor> p = {w.router, w.gate, w.up, w.down};
  if (w.shared_gate.defined()) {
    for (const at::Tensor& t : {w.shared_gate, w.shared_up, w.shared_down, w.shared_expert_gate}) p.push_back(t);
  }
  return p;
}

struct Case {
  int64_t experts, top_k;
  bool normalize;
  int64_t shared_ffn;
};

class MoeMatchesTheReference : public ::testing::TestWithParam<Case> {};

TEST_P(MoeMatchesTheReference, ForwardAndBackward) {
  const Case c = GetParam();
  const int64_t T = 13, h = 8, ffn = 12;
  MoeSettings s;
  s.experts = c.experts;
  s.top_k = c.top_k;
  s.normalize_top_k = c.normalize;
  MoeWeights w = random_weights(c.experts, h, ffn, c.shared_ffn, 7);
  const at::Tensor x = at::randn({T, h}).requires_grad_();
  const at::Tensor probe = at::randn({T, h});

  MoeRouting routing;
  const at::Tensor got = moe_mlp(x, w, s, &routing);
  const at::Tensor want = reference(x, w, s);
  EXPECT_TRUE(at::allclose(got, want, 1e-5, 1e-6)) << (got - want).abs().max().item<double>();
  // Every token went to k experts; nothing dropped.
  int64_t assigned = 0;
  for (int64_t n : routing.tokens_per_expert) assigned += n;
  EXPECT_EQ(assigned, T * c.top_k);
  EXPECT_EQ(routing.dropped, 0);
  EXPECT_EQ(routing.logits.sizes().vec(), (std::vector<int64_t>{T, c.experts}));

  std::vector<at::Tensor> inputs = parameters(w);
  inputs.push_back(x);
  const auto got_grads = torch::autograd::grad({(got * probe).sum()}, inputs);
  const auto want_grads = torch::autograd::grad({(want * probe).sum()}, inputs);
  for (size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_TRUE(at::allclose(got_grads[i], want_grads[i], 1e-5, 1e-6))
        << "gradient " << i << ": " << (got_grads[i] - want_grads[i]).abs().max().item<double>();
  }
}

INSTANTIATE_TEST_SUITE_P(Routings, MoeMatchesTheReference,
                         ::testing::Values(Case{4, 2, true, 0},    // Mixtral
                                           Case{4, 1, true, 0},    // top-1 (Switch)
                                           Case{6, 2, false, 0},   // Qwen2-MoE without norm_topk_prob
                                           Case{6, 2, false, 10},  // with its shared expert
                                           Case{3, 3, true, 0}));  // every expert

TEST(Moe, CapacityDropsTheAssignmentsPastItInSlotThenTokenOrder) {
  // Every token prefers expert 0, then expert 1: with 8 tokens, k 2, 4
  // experts and capacity factor 1, each expert takes ceil(8 * 2 / 4) = 4.
  const int64_t T = 8, h = 4, E = 4;
  MoeSettings s;
  s.experts = E;
  s.top_k = 2;
  s.capacity_factor = 1.0;
  MoeWeights w = random_weights(E, h, 6, 0, 3);
  w.router = at::zeros({E, h});
  const at::Tensor x = at::ones({T, h});
  {
    at::NoGradGuard no_grad;
    w.router[0].fill_(2.0);
    w.router[1].fill_(1.0);
  }
  EXPECT_EQ(moe_capacity(s, T), 4);
  MoeRouting routing;
  const at::Tensor out = moe_mlp(x, w, s, &routing);
  EXPECT_EQ(routing.tokens_per_expert, (std::vector<int64_t>{4, 4, 0, 0}));
  EXPECT_EQ(routing.dropped, 8);
  // Tokens 0-3 kept both experts; 4-7 lost both (first choices fill expert
  // 0 with tokens 0-3, second choices expert 1 with the same tokens).
  MoeSettings dropless = s;
  dropless.capacity_factor = 0.0;
  const at::Tensor full = moe_mlp(x, w, dropless);
  EXPECT_TRUE(at::allclose(out.narrow(0, 0, 4), full.narrow(0, 0, 4)));
  EXPECT_TRUE(at::equal(out.narrow(0, 4, 4), at::zeros({4, h})));
}

// Issue 50 (17): a factor meant as "never drop" (1e300) overflowed the
// int64 conversion and capped every expert at 1, dropping silently.
TEST(Moe, ACapacityOfEveryTokenOrMoreIsNoCap) {
  const int64_t T = 1024, h = 4, E = 4;
  MoeSettings s;
  s.experts = E;
  s.top_k = 2;
  for (const double factor : {1e300, 1e18, 2.0}) {
    SCOPED_TRACE(factor);
    s.capacity_factor = factor;  // 2.0: 2 x 1024 x 2 / 4 = 1024, every token
    EXPECT_EQ(moe_capacity(s, T), 0);
    MoeRouting routing;
    moe_mlp(at::randn({T, h}), random_weights(E, h, 6, 0, 3), s, &routing);
    EXPECT_EQ(routing.dropped, 0);
    int64_t taken = 0;
    for (const int64_t n : routing.tokens_per_expert) taken += n;
    EXPECT_EQ(taken, T * s.top_k);
  }
  s.capacity_factor = 1.99;  // just under every token: a cap
  EXPECT_EQ(moe_capacity(s, T), 1019);
}

TEST(Moe, LoadBalancingLossIsTransformersFormula) {
  // Three tokens, two experts, top-1: probabilities (.25, .75), (.25, .75),
  // (.75, .25); the assignments 1, 1, 0, so f = (1/3, 2/3) and
  // P = (1.25/3, 1.75/3): 2 x (1.25 + 3.5) / 9.
  const double l3 = std::log(3.0);
  const at::Tensor logits = at::tensor({0.0, l3, 0.0, l3, l3, 0.0}, at::kDouble).reshape({3, 2}).to(at::kFloat);
  EXPECT_NEAR(load_balancing_loss({logits}, 2, 1).item<double>(), 9.5 / 9.0, 1e-6);
  // Over two layers the tokens pool: the same logits twice give the same loss.
  EXPECT_NEAR(load_balancing_loss({logits, logits}, 2, 1).item<double>(), 9.5 / 9.0, 1e-6);
  // Perfect balance at top-k over E experts gives k.
  EXPECT_NEAR(load_balancing_loss({at::zeros({4, 4}).index_fill_(1, at::tensor({int64_t{0}}), 1e-3)}, 4, 4).item<double>(),
              4.0, 1e-3);
}

TEST(Moe, RouterZLoss) {
  const at::Tensor logits = at::tensor({0.0f, 0.0f, 1.0f, 1.0f}).reshape({2, 2});
  const double a = std::log(2.0), b = 1.0 + std::log(2.0);
  EXPECT_NEAR(router_z_loss({logits}).item<double>(), (a * a + b * b) / 2, 1e-6);
}

TEST(Moe, BadShapesAndSettingsAreRefused) {
  MoeSettings s;
  s.experts = 4;
  MoeWeights w = random_weights(4, 8, 12, 0, 1);
  EXPECT_THROW(moe_mlp(at::randn({3, 7}), w, s), std::invalid_argument);
  s.top_k = 5;
  EXPECT_THROW(moe_mlp(at::randn({3, 8}), w, s), std::invalid_argument);
  s.top_k = 2;
  s.capacity_factor = -1;
  EXPECT_THROW(moe_mlp(at::randn({3, 8}), w, s), std::invalid_argument);
}

}  // namespace
