// The llama family's units and forward (see gpt.h, gpt_config.h): what
// transformers' LlamaForCausalLM computes, in the host's sequence-major
// layout. Parameter names are the transformers ones without the "model."
// prefix, so checkpoints map one to one (checkpoint/hf_checkpoint.h).
//
//   block:  h = x + o(attention(rope(q(n1(x))), rope(k(n1(x))), v(n1(x))))
//           (q, k and v with biases under qkv_bias: Qwen2's attention)
//           y = h + down(silu(gate(n2(h))) * up(n2(h)))
//           (with experts, Mixtral's: y = h + moe(n2(h)), model/moe.h and
//           llama_experts.cpp)
//   RMSNorm n(x) = w * (x / sqrt(mean(x^2) + eps)), computed in fp32;
//   rotary: q, k rotated by position * theta^(-2i/d) (the rotate_half form),
//   the frequencies scaled by rope_scaling's type (model/rotary.h), only the
//   first partial_rotary_factor of each head's features rotated;
//   grouped-query attention: each of the n_kv_head key/value heads serves
//   n_head / n_kv_head consecutive query heads, each head_dim wide;
//   under qk_norm (Qwen3) each head of q and k RMSNormed before rotation;
//   under sliding_window (Mistral) query i sees keys i - window + 1 .. i;
//   under tie_embeddings the head projects with embed_tokens.weight.
// The block's other choices (GptConfig::block, cli/block_choices.h): the
// norms around each sub-layer (sandwich: Gemma 2/3; post only: OLMo 2),
// RMSNorm as 1 + w (Gemma), q/k normed over the whole projection (OLMo 2),
// GeGLU, the embeddings scaled by sqrt(n_embd), the softmax scale, capped
// attention and output logits, and per layer a window and rotary base.
// Tensor parallel as GPT-2's blocks (gpt.cpp): q, k, v, gate and up are
// column-parallel (this rank's query and key/value heads, its MLP slice),
// o and down row-parallel; embed_tokens and lm_head vocab-parallel.
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <tuple>

#include "host/model/block_parts.h"
#include "host/model/capped_attention.h"
#include "host/model/gpt.h"
#include "host/model/rotary.h"
#include "host/model/tensor_parallel.h"

namespace accel::model {
namespace {

ParamSpec linear_weight(std::string name, int64_t out, int64_t in, ParallelHint hint) {
  return ParamSpec{std::move(name), ParamRole::linear_weight, hint, {out, in}, InitKind::normal, 0.02};
}
// A column linear's bias splits with its weight (tensor_parallel_plan.cpp).
ParamSpec column_bias(std::string name, int64_t n) {
  return ParamSpec{std::move(name), ParamRole::bias, ParallelHint::column, {n}, InitKind::zeros, 0.0};
}
ParamSpec rms_norm_weight(std::string name, int64_t n) {
  return ParamSpec{std::move(name), ParamRole::norm, ParallelHint::replicated, {n}, InitKind::ones, 0.0};
}

// A mixture of experts' MLP as transformers 5 keeps Mixtral's in memory
// (MixtralSparseMoeBlock): the router, then every expert's gate and up
// projections stacked as [E, 2F, C] (gate rows first) and its down
// projections as [E, C, F]. On disk transformers writes one tensor per
// expert and projection (hf_moe.cpp maps the two). With a shared
// expert, Qwen2-MoE's (Qwen2MoeSparseMoeBlock): its SwiGLU projections,
// whole on every tensor rank as the experts are (linear weights: the FP8
// chain casts them), and its [1, C] sigmoid gate (a router-like weight).
std::vector<ParamSpec> expert_specs(const GptConfig& c, const std::string& p) {
  const int64_t C = c.n_embd, F = c.ffn_size, E = c.n_experts, S = c.shared_expert_size;
  std::vector<ParamSpec> specs = {
      ParamSpec{p + "mlp.gate.weight", ParamRole::router, ParallelHint::replicated, {E, C}, InitKind::normal, 0.02},
      ParamSpec{p + "mlp.experts.gate_up_proj", ParamRole::experts, ParallelHint::replicated, {E, 2 * F, C},
                InitKind::normal, 0.02},
      ParamSpec{p + "mlp.experts.down_proj", ParamRole::experts, ParallelHint::replicated, {E, C, F},
                InitKind::normal, 0.02}};
  if (S > 0) {
    specs.push_back(linear_weight(p + "mlp.shared_expert.gate_proj.weight", S, C, ParallelHint::replicated));
    specs.push_back(linear_weight(p + "mlp.shared_expert.up_proj.weight", S, C, ParallelHint::replicated));
    specs.push_back(linear_weight(p + "mlp.shared_expert.down_proj.weight", C, S, ParallelHint::replicated));
    specs.push_back(
        ParamSpec{p + "mlp.shared_expert_gate.weight", ParamRole::router, ParallelHint::replicated, {1, C},
                  InitKind::normal, 0.02});
  }
  return specs;
}

std::vector<ParamSpec> llama_block_specs(const GptConfig& c, int64_t layer) {
  const int64_t C = c.n_embd, D = c.attention_head_dim(), q = c.n_head * D, kv = c.n_kv_head * D, F = c.ffn_size;
  const std::string p = "layers." + std::to_string(layer) + ".";
  const BlockChoices& b = c.block;
  // Gemma's norms scale by 1 + w: zero weights are its identity.
  auto norm = [&](std::string name, int64_t n) {
    ParamSpec spec = rms_norm_weight(std::move(name), n);
    if (b.norm_plus_one) spec.init = InitKind::zeros;
    return spec;
  };
  std::vector<ParamSpec> specs;
  if (b.norm_placement != BlockChoices::NormPlacement::post) specs.push_back(norm(p + "input_layernorm.weight", C));
  for (const auto& [name, rows] : {std::pair{"q_proj", q}, std::pair{"k_proj", kv}, std::pair{"v_proj", kv}}) {
    specs.push_back(linear_weight(p + "self_attn." + name + ".weight", rows, C, ParallelHint::column));
    if (c.qkv_bias) specs.push_back(column_bias(p + "self_attn." + name + ".bias", rows));
  }
  specs.push_back(linear_weight(p + "self_attn.o_proj.weight", C, q, ParallelHint::row));
  if (c.qk_norm || b.qk_norm_whole) {  // after o_proj: the other parameters keep their places
    specs.push_back(norm(p + "self_attn.q_norm.weight", c.qk_norm ? D : q));
    specs.push_back(norm(p + "self_attn.k_norm.weight", c.qk_norm ? D : kv));
  }
  specs.push_back(norm(p + "post_attention_layernorm.weight", C));
  if (b.norm_placement == BlockChoices::NormPlacement::sandwich) {
    specs.push_back(norm(p + "pre_feedforward_layernorm.weight", C));
  }
  if (c.has_experts()) {
    for (ParamSpec& spec : expert_specs(c, p)) specs.push_back(std::move(spec));
  } else {
    specs.push_back(linear_weight(p + "mlp.gate_proj.weight", F, C, ParallelHint::column));
    specs.push_back(linear_weight(p + "mlp.up_proj.weight", F, C, ParallelHint::column));
    specs.push_back(linear_weight(p + "mlp.down_proj.weight", C, F, ParallelHint::row));
  }
  if (b.norm_placement != BlockChoices::NormPlacement::pre) {
    specs.push_back(norm(p + "post_feedforward_layernorm.weight", C));
  }
  return specs;
}

// The boolean mask [T, keys] of the last T of `keys` positions (the
// earlier ones cached) over all of them: causal, and no key `window` or
// more positions behind its query.
at::Tensor sliding_window_mask(int64_t T, int64_t keys, int64_t window, at::Device device) {
  const auto i64 = at::TensorOptions().dtype(at::kLong).device(device);
  const at::Tensor query = at::arange(keys - T, keys, i64).unsqueeze(1);
  const at::Tensor key = at::arange(0, keys, i64).unsqueeze(0);
  return (key <= query).logical_and(key > query - window);
}

at::Tensor rotate_half(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

}  // namespace

void GptModel::add_llama_units(at::Device device, bool allocate) {
  const GptConfig& c = config_;
  units_.emplace_back("embedding", UnitKind::embedding,
                      std::vector<ParamSpec>{{"embed_tokens.weight", ParamRole::embedding, ParallelHint::vocab,
                                              {c.vocab_size, c.n_embd}, InitKind::normal, 0.02}},
                      device, allocate);
  for (int64_t layer = 0; layer < c.n_layer; ++layer) {
    units_.emplace_back("block." + std::to_string(layer), UnitKind::block, llama_block_specs(c, layer), device,
                        allocate);
  }
  std::vector<ParamSpec> head = {rms_norm_weight("norm.weight", c.n_embd)};
  if (c.block.norm_plus_one) head.front().init = InitKind::zeros;
  if (!c.tie_embeddings) {
    head.push_back(linear_weight("lm_head.weight", c.vocab_size, c.n_embd, ParallelHint::vocab));
  }
  units_.emplace_back("head", UnitKind::head, std::move(head), device, allocate);
  llama_layout_ = LlamaLayout::resolve(units_[1], c);
  routing_.resize(units_.size());
}

GptModel::LlamaLayout GptModel::LlamaLayout::resolve(const Unit& block, const GptConfig& config) {
  auto index_of = [&](const char* suffix) { return param_index_by_suffix(block, suffix); };
  const BlockChoices::NormPlacement placement = config.block.norm_placement;
  LlamaLayout layout{placement == BlockChoices::NormPlacement::post ? LlamaLayout::kNone
                                                                    : index_of(".input_layernorm.weight"),
                     index_of(".q_proj.weight"),
                     index_of(".k_proj.weight"),
                     index_of(".v_proj.weight"),
                     index_of(".o_proj.weight"),
                     index_of(".post_attention_layernorm.weight")};
  if (placement == BlockChoices::NormPlacement::sandwich) {
    layout.pre_ffn_norm = index_of(".pre_feedforward_layernorm.weight");
  }
  if (placement != BlockChoices::NormPlacement::pre) {
    layout.post_ffn_norm = index_of(".post_feedforward_layernorm.weight");
  }
  if (config.qk_norm || config.block.qk_norm_whole) {
    layout.q_norm = index_of(".self_attn.q_norm.weight");
    layout.k_norm = index_of(".self_attn.k_norm.weight");
  }
  if (config.qkv_bias) {
    layout.q_bias = index_of(".q_proj.bias");
    layout.k_bias = index_of(".k_proj.bias");
    layout.v_bias = index_of(".v_proj.bias");
  }
  if (config.has_experts()) {
    layout.router = index_of(".mlp.gate.weight");
    layout.experts_gate_up = index_of(".mlp.experts.gate_up_proj");
    layout.experts_down = index_of(".mlp.experts.down_proj");
    if (config.shared_expert_size > 0) {
      layout.shared_gate = index_of(".mlp.shared_expert.gate_proj.weight");
      layout.shared_up = index_of(".mlp.shared_expert.up_proj.weight");
      layout.shared_down = index_of(".mlp.shared_expert.down_proj.weight");
      layout.shared_expert_gate = index_of(".mlp.shared_expert_gate.weight");
    }
  } else {
    layout.gate = index_of(".gate_proj.weight");
    layout.up = index_of(".up_proj.weight");
    layout.down = index_of(".down_proj.weight");
  }
  return layout;
}

at::Tensor GptModel::llama_block(const Unit& unit, const at::Tensor& x, KvCache* cache, size_t layer,
                                 int64_t offset) const {
  const auto& p = unit.params();
  const LlamaLayout& L = llama_layout_;
  const auto unit_index = static_cast<int32_t>(&unit - units_.data());
  auto linear = [&](const at::Tensor& in, size_t weight, size_t bias = LlamaLayout::kNone) {
    const at::Tensor b = bias == LlamaLayout::kNone ? at::Tensor() : p[bias].value;
    if (!linear_) return at::linear(in, p[weight].value, b);
    return linear_(in, p[weight].value, b, unit_index, static_cast<int32_t>(weight));
  };
  const TensorGroup& tp = tensor_group_;
  // Identities unsplit (Megatron's f and g). Under tensor parallelism the
  // column linears' input enters the tensor region once per sub-layer (one
  // all-reduce of its gradient for q, k and v together, one for gate and up);
  // with sequence parallelism it is gathered along the sequence instead, and
  // a row linear's output reduce-scattered back to this rank's slice.
  auto enter = [&](const at::Tensor& in) {
    return tp.sequence_split() ? gather_from_sequence_region(in, tp) : copy_to_tensor_region(in, tp);
  };
  auto row = [&](const at::Tensor& in, size_t weight) {
    const at::Tensor partial = linear(in, weight);
    if (!tp.active()) return partial;
    return tp.sequence_split() ? reduce_scatter_to_sequence_region(partial, tp) : reduce_from_tensor_region(partial, tp);
  };
  const int64_t D = config_.attention_head_dim();
  const int64_t H = p[L.q].shape[0] / D, KV = p[L.k].shape[0] / D;  // this rank's heads
  const BlockChoices& choices = config_.block;
  const auto placement = choices.norm_placement;
  // A norm on its own (the sandwich's and the post-norms'; add_norm takes
  // Gemma's 1 + w where the block says so).
  auto norm = [&](const at::Tensor& in, size_t weight) { return add_norm(in, at::Tensor(), p[weight].value).normed; };
  // OLMo 2 norms nothing before attention: the residual enters as it is.
  const at::Tensor h = enter(placement == BlockChoices::NormPlacement::post ? x : norm(x, L.attn_norm));
  const int64_t T = h.size(0), B = h.size(1);
  // This block's layer (unit 0 is the embedding): its window and rotary base.
  const int64_t layer_index = (&unit - units_.data()) - 1;
  const bool sliding = config_.sliding_window > 0 && choices.sliding_layer(layer_index);
  const bool local_rope = sliding && choices.rope_local_theta > 0;
  // Positions offset .. offset + T - 1, or this rank's part of the sequence.
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(x.device());
  const at::Tensor positions = context_group_.active()
                                   ? context_group_.positions(T * context_group_.size, x.device()).to(at::kFloat)
                                   : at::arange(offset, offset + T, f32);
  // The longest sequence so far (the largest position + 1): dynamic and
  // longrope scaling depend on it, as transformers' rotary update does.
  const int64_t seen = context_group_.active() ? T * context_group_.size : offset + T;
  // SmolLM3's layers without rotary (units_ begin with the embedding).
  const bool rotates = config_.rotates_layer(unit_index - 1);
  at::Tensor cos32, sin32;
  if (rotates) {
    std::tie(cos32, sin32) =
        rotary_angles(positions, config_.rotary_dim(), local_rope ? choices.rope_local_theta : config_.rope_theta,
                      local_rope ? RopeScaling{} : config_.rope_scaling, seen);
  }
  // Qwen3 and Gemma 3: each head of q and k normed over its D features (the
  // weights' [D] broadcast over the heads) before the rotation; OLMo 2: the
  // whole projection normed (its statistics over every head).
  // (ATen's composition, never the fused add-norm, as Qwen3's always ran.)
  auto qk_normed = [&](const at::Tensor& projected, int64_t heads, size_t weight) {
    if (weight == LlamaLayout::kNone) return projected;
    auto normed = [&](const at::Tensor& t) {
      return choices.norm_plus_one ? rms_norm_plus_one(t, p[weight].value, config_.norm_eps)
                                   : rms_norm(t, p[weight].value, config_.norm_eps);
    };
    if (choices.qk_norm_whole) return normed(projected);
    return normed(projected.view({T, B, heads, D})).view({T, B, heads * D});
  };
  auto turned = [&](const at::Tensor& projected, int64_t heads) {
    if (rotates) return rotated_heads(projected, heads, cos32, sin32);
    return projected.view({T, B, heads, D}).permute({1, 2, 0, 3});
  };
  // Ministral 3: each query scaled by its position, after the rotation, as
  // transformers' get_llama_4_attn_scale (positions as fp32, cast to q's dtype).
  auto scaled_by_position = [&](const at::Tensor& query, const at::Tensor& at_positions) {
    const double beta = config_.query_position_scale_beta;
    if (beta == 0.0) return query;
    const auto original = static_cast<double>(config_.rope_scaling.original_max_position);
    const at::Tensor scale = at::log(at::floor(at_positions / original) + 1.0) * beta + 1.0;
    return query * scale.view({1, 1, -1, 1}).to(query.scalar_type());
  };
  at::Tensor q = scaled_by_position(turned(qk_normed(linear(h, L.q, L.q_bias), H, L.q_norm), H), positions),
             k = turned(qk_normed(linear(h, L.k, L.k_bias), KV, L.k_norm), KV),
             v = linear(h, L.v, L.v_bias).view({T, B, KV, D}).permute({1, 2, 0, 3});
  bool causal = true;
  std::optional<at::Tensor> mask;
  if (cache) mask = append_to_cache(cache->keys.at(layer), cache->values.at(layer), k, v, causal);
  if (sliding && k.size(2) > config_.sliding_window) {
    // The window over the keys present (the cached ones too): query at
    // position t sees keys t - window + 1 .. t, transformers' rule.
    mask = sliding_window_mask(T, k.size(2), config_.sliding_window, x.device());
    causal = false;
  }
  if (KV != H && !context_group_.active()) {  // the context exchange sends KV heads, not H
    k = k.repeat_interleave(H / KV, 1);
    v = v.repeat_interleave(H / KV, 1);
  }
  // Gemma's softmax scale (query_pre_attn_scalar^-0.5) or Granite's
  // (attention_multiplier); capped logits need the scores themselves.
  std::optional<double> scale;
  if (choices.query_pre_attn_scalar > 0) {
    scale = std::pow(choices.query_pre_attn_scalar, -0.5);
  } else if (config_.attention_multiplier > 0.0) {
    scale = config_.attention_multiplier;
  }
  at::Tensor y = choices.attn_logit_softcap > 0
                     ? softcapped_attention(q, k, v, mask, causal, scale.value_or(std::pow(static_cast<double>(D), -0.5)),
                                            choices.attn_logit_softcap)
                     : attention(q, k, v, mask, causal, scale);
  y = y.permute({2, 0, 1, 3}).reshape({T, B, H * D});
  // Granite's residual_multiplier scales each sub-layer's output.
  auto residual = [&](const at::Tensor& out) {
    return config_.residual_multiplier == 1.0 ? out : out * config_.residual_multiplier;
  };
  // The experts take each token whole: no tensor region (a tensor group is
  // refused with experts, runtime/tensor_parallel_plan.cpp), and their
  // router the norm in fp32, as before the fused path.
  if (config_.has_experts()) {
    const at::Tensor out = x + residual(row(y, L.o));
    return out + residual(llama_experts(unit, rms_norm(out, p[L.mlp_norm].value, config_.norm_eps)));
  }
  auto mlp = [&](const at::Tensor& in) {
    const at::Tensor gate = linear(in, L.gate), up = linear(in, L.up);
    if (choices.mlp_activation == BlockChoices::MlpActivation::gelu_tanh) return row(at::gelu(gate, "tanh") * up, L.down);
    const bool fused_mlp = fused_for(gate) && fused::swiglu_supported(gate, up);
    return row(fused_mlp ? fused::swiglu(gate, up) : at::silu(gate) * up, L.down);
  };
  if (placement == BlockChoices::NormPlacement::pre) {
    const fused::AddNorm attended = add_norm(x, residual(row(y, L.o)), p[L.mlp_norm].value);
    return attended.sum + residual(mlp(enter(attended.normed)));
  }
  // Sandwich (Gemma) and post (OLMo 2): each sub-layer's output normed
  // before it joins the residual; the sandwich norms the MLP's input too.
  const at::Tensor attended = x + residual(norm(row(y, L.o), L.mlp_norm));
  const at::Tensor m = enter(placement == BlockChoices::NormPlacement::sandwich ? norm(attended, L.pre_ffn_norm)
                                                                               : attended);
  return attended + residual(norm(mlp(m), L.post_ffn_norm));
}

at::Tensor GptModel::rotated_heads(const at::Tensor& projected, int64_t heads, const at::Tensor& cos32,
                                   const at::Tensor& sin32) const {
  const int64_t T = projected.size(0), B = projected.size(1), D = projected.size(2) / heads;
  const at::Tensor by_position = projected.view({T, B, heads, D});
  if (fused_for(projected) && fused::rotary_supported(by_position, cos32, sin32)) {
    return fused::rotary(by_position, cos32, sin32).permute({1, 2, 0, 3});
  }
  // transformers' order: the angles rounded to the activations' dtype first.
  const at::Tensor x = by_position.permute({1, 2, 0, 3});  // [B, heads, T, D]
  const at::Tensor cos = cos32.to(x.scalar_type()), sin = sin32.to(x.scalar_type());
  const int64_t rotated = cos32.size(-1);
  if (rotated == D) return x * cos + rotate_half(x) * sin;
  // Partial rotary (Phi-3's partial_rotary_factor): the first `rotated`
  // features turn, the rest pass through.
  const at::Tensor turned = x.narrow(-1, 0, rotated);
  return at::cat({turned * cos + rotate_half(turned) * sin, x.narrow(-1, rotated, D - rotated)}, -1);
}

at::Tensor GptModel::llama_head(const Unit& unit, const at::Tensor& x) const {
  const at::Tensor h = add_norm(x, at::Tensor(), unit.param("norm.weight").value).normed;
  // This rank's vocabulary rows of lm_head, or of the tied embedding
  // (vocab-parallel logits).
  const TensorGroup& tp = tensor_group_;
  const at::Tensor all = tp.sequence_split() ? gather_from_sequence_region(h, tp) : copy_to_tensor_region(h, tp);
  const Param& table =
      config_.tie_embeddings ? units_.front().param("embed_tokens.weight") : unit.param("lm_head.weight");
  at::Tensor logits = vocab_projection(all, table.value);
  // Granite divides the logits (transformers: `logits / logits_scaling`).
  if (config_.logits_scaling != 1.0) logits = logits / config_.logits_scaling;
  // Gemma 2's final_logit_softcapping, as transformers: divide, tanh, multiply.
  const double cap = config_.block.final_logit_softcap;
  return cap > 0 ? at::tanh(logits / cap) * cap : logits;
}

}  // namespace accel::model
