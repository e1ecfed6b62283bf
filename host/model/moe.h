// A mixture-of-experts MLP (issue 36), the one Mixtral and Qwen2-MoE put in
// place of the Llama block's SwiGLU: a router scores the E experts for each
// token, the k best take it, and the token's output is their SwiGLU outputs
// weighted by the router's probabilities; Qwen2-MoE adds a shared expert
// that every token goes through, scaled by a sigmoid gate.
//
// The arithmetic is transformers' (MixtralSparseMoeBlock,
// Qwen2MoeSparseMoeBlock): softmax over the router logits in fp32, top-k,
// the k probabilities renormalised to sum 1 when normalize_top_k (Mixtral
// always; Qwen2-MoE's norm_topk_prob), cast back to the activations' dtype;
// each expert's outputs added into the tokens' rows expert by expert, and
// within an expert in (slot, token) order, as transformers' loop does.
//
// Dropless by default. With a capacity factor cf > 0 each expert takes at
// most ceil(cf x tokens x k / E) assignments: first choices before second
// ones (GShard's and DeepSpeed's priority), tokens in order within a slot;
// an assignment over capacity is dropped (it adds nothing; the token keeps
// its other experts and the residual) and counted.
//
// Everything is ATen with autograd: backward is the ops' own. Not
// thread-safe beyond ATen's rules; no state.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "host/model/expert_parallel.h"

namespace accel::model {

struct MoeSettings {
  int64_t experts = 8;
  int64_t top_k = 2;             // 1 <= top_k <= experts
  bool normalize_top_k = true;   // Mixtral: true; Qwen2-MoE: its norm_topk_prob
  double capacity_factor = 0.0;  // 0: dropless
};

// Which projection a MoeWeights::linear call computes (each SwiGLU's gate,
// up, down in that order: moe.cpp counts on it).
enum class MoeProjection { expert_gate, expert_up, expert_down, shared_gate, shared_up, shared_down };

// One layer's weights; the experts stacked on the first dimension.
struct MoeWeights {
  at::Tensor router;  // [E, h]
  at::Tensor gate;    // [E, ffn, h]  (Mixtral's w1)
  at::Tensor up;      // [E, ffn, h]  (w3)
  at::Tensor down;    // [E, h, ffn]  (w2)
  // Qwen2-MoE's shared expert; undefined when the model has none.
  at::Tensor shared_gate;         // [ffn_shared, h]
  at::Tensor shared_up;           // [ffn_shared, h]
  at::Tensor shared_down;         // [h, ffn_shared]
  at::Tensor shared_expert_gate;  // [1, h]
  // How a projection runs, y = x W^T with W one expert's [out, in] matrix
  // or the shared expert's: at::linear when empty; the model routes them
  // through the plugins' linear chain (FP8).
  std::function<at::Tensor(const at::Tensor& x, const at::Tensor& weight, MoeProjection which)> linear;
};

// What the router did, for the auxiliary losses and the metrics.
struct MoeRouting {
  at::Tensor logits;             // [T, E], the router's (differentiable)
  std::vector<int64_t> tokens_per_expert;  // assignments each expert took
  int64_t dropped = 0;           // assignments over capacity
};

// x: [T, h] (tokens flattened). Returns [T, h]; fills *routing when given.
// With an active expert `group` (expert_parallel.h) the router is whole
// ([E, h]) but gate, up and down hold this rank's E / P experts; x is this
// rank's tokens, routed over all E. Throws std::invalid_argument for shapes
// or settings that do not fit.
at::Tensor moe_mlp(const at::Tensor& x, const MoeWeights& weights, const MoeSettings& settings,
                   MoeRouting* routing = nullptr, const ExpertGroup* group = nullptr);

// The expert capacity for `tokens` tokens: ceil(factor x tokens x k / E),
// at least 1; 0 (unbounded, dropless) for a factor of 0 and for a capacity
// of `tokens` or more, which could drop nothing.
int64_t moe_capacity(const MoeSettings& settings, int64_t tokens);

// transformers' load_balancing_loss_func without an attention mask, over
// the router logits of every layer: E x sum_e f_e x P_e, where f_e is the
// top-k assignments to expert e per token and P_e the mean router
// probability of e, both over every layer's tokens. Differentiable through
// P only (the assignments are counts).
at::Tensor load_balancing_loss(const std::vector<at::Tensor>& router_logits, int64_t experts, int64_t top_k);

// ST-MoE's router z-loss: the mean over every layer's tokens of
// logsumexp(logits)^2.
at::Tensor router_z_loss(const std::vector<at::Tensor>& router_logits);

}  // namespace accel::model
