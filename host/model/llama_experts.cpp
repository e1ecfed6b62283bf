// The llama family's mixture-of-experts MLP (Mixtral's block) and the
// record of what its routers did (see gpt.h, moe.h).
#include <stdexcept>

#include "host/model/gpt.h"

namespace accel::model {

at::Tensor GptModel::llama_experts(const Unit& unit, const at::Tensor& x) const {
  const auto& p = unit.params();
  const LlamaLayout& L = llama_layout_;
  const int64_t F = config_.ffn_size;
  const at::Tensor& gate_up = p[L.experts_gate_up].value;  // [E, 2F, C]: gate rows, then up rows
  MoeWeights weights;
  weights.router = p[L.router].value;
  weights.gate = gate_up.narrow(1, 0, F);
  weights.up = gate_up.narrow(1, F, F);
  weights.down = p[L.experts_down].value;
  if (config_.shared_expert_size > 0) {
    weights.shared_gate = p[L.shared_gate].value;
    weights.shared_up = p[L.shared_up].value;
    weights.shared_down = p[L.shared_down].value;
    weights.shared_expert_gate = p[L.shared_expert_gate].value;
  }
  if (linear_) {
    // Each projection through the plugins' linear chain (FP8), as the
    // parameter it is (a slice of): an expert's gate and up are both
    // gate_up_proj's.
    const auto unit_index = static_cast<int32_t>(&unit - units_.data());
    weights.linear = [this, unit_index, L](const at::Tensor& x, const at::Tensor& w, MoeProjection which) {
      size_t param = L.experts_gate_up;
      switch (which) {
        case MoeProjection::expert_gate:
        case MoeProjection::expert_up: param = L.experts_gate_up; break;
        case MoeProjection::expert_down: param = L.experts_down; break;
        case MoeProjection::shared_gate: param = L.shared_gate; break;
        case MoeProjection::shared_up: param = L.shared_up; break;
        case MoeProjection::shared_down: param = L.shared_down; break;
      }
      return linear_(x, w, at::Tensor(), unit_index, static_cast<int32_t>(param));
    };
  }
  MoeSettings settings;
  settings.experts = config_.n_experts;
  settings.top_k = config_.experts_per_token;
  settings.normalize_top_k = config_.normalize_top_k;  // Mixtral: true; Qwen2-MoE: its norm_topk_prob
  settings.capacity_factor = moe_training_.capacity_factor;
  const int64_t T = x.size(0), B = x.size(1), C = x.size(2);
  MoeRouting& routing = routing_.at(static_cast<size_t>(&unit - units_.data()));
  // Tokens in the host's sequence-major order: capacity's queue follows it.
  const at::Tensor y = moe_mlp(x.reshape({T * B, C}), weights, settings, &routing, &expert_group_);
  // Kept only for the auxiliary losses: they hold the router's graph.
  if (!moe_losses_on()) routing.logits = at::Tensor();
  return y.view({T, B, C});
}

// routing_ has a slot per unit of a llama model; GPT-2's has none.
const MoeRouting& GptModel::latest_routing(size_t unit) const {
  static const MoeRouting none;
  return unit < routing_.size() ? routing_[unit] : none;
}

at::Tensor GptModel::take_router_logits(size_t unit) const {
  return unit < routing_.size() ? std::move(routing_[unit].logits) : at::Tensor();
}

at::Tensor GptModel::moe_auxiliary_loss(const std::vector<at::Tensor>& router_logits) const {
  if (router_logits.empty()) throw std::logic_error("moe_auxiliary_loss: no router logits");
  at::Tensor loss = at::zeros({}, router_logits.front().options().dtype(at::kFloat));
  if (moe_training_.aux_loss_coef > 0.0) {
    loss = loss + moe_training_.aux_loss_coef *
                      load_balancing_loss(router_logits, config_.n_experts, config_.experts_per_token);
  }
  if (moe_training_.z_loss_coef > 0.0) loss = loss + moe_training_.z_loss_coef * router_z_loss(router_logits);
  return loss;
}

}  // namespace accel::model
