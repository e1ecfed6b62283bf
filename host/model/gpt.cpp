// GPT-2 as units (see gpt.h).
#include "host/model/gpt.h"

#include <ATen/autocast_mode.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "host/model/block_parts.h"

namespace accel::model {
namespace {

ParamSpec weight(std::string name, std::vector<int64_t> shape, ParallelHint hint, double std_dev) {
  return ParamSpec{std::move(name), ParamRole::linear_weight, hint, std::move(shape),
                   InitKind::normal, std_dev};
}
ParamSpec bias(std::string name, int64_t n, ParallelHint hint) {
  return ParamSpec{std::move(name), ParamRole::bias, hint, {n}, InitKind::zeros, 0.0};
}
std::vector<ParamSpec> layer_norm(const std::string& prefix, int64_t n) {
  return {ParamSpec{prefix + ".weight", ParamRole::norm, ParallelHint::replicated, {n}, InitKind::ones, 0.0},
          ParamSpec{prefix + ".bias", ParamRole::norm, ParallelHint::replicated, {n}, InitKind::zeros, 0.0}};
}

std::vector<ParamSpec> block_specs(const GptConfig& c, int64_t layer) {
  const int64_t C = c.n_embd;
  const std::string p = "h." + std::to_string(layer) + ".";
  // GPT-2: residual projections scaled by 1/sqrt(2 * n_layer).
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  std::vector<ParamSpec> specs = layer_norm(p + "ln_1", C);
  specs.push_back(weight(p + "attn.c_attn.weight", {3 * C, C}, ParallelHint::column, 0.02));
  specs.push_back(bias(p + "attn.c_attn.bias", 3 * C, ParallelHint::column));
  specs.push_back(weight(p + "attn.c_proj.weight", {C, C}, ParallelHint::row, residual_std));
  specs.push_back(bias(p + "attn.c_proj.bias", C, ParallelHint::replicated));
  for (ParamSpec& s : layer_norm(p + "ln_2", C)) specs.push_back(std::move(s));
  specs.push_back(weight(p + "mlp.c_fc.weight", {4 * C, C}, ParallelHint::column, 0.02));
  specs.push_back(bias(p + "mlp.c_fc.bias", 4 * C, ParallelHint::column));
  specs.push_back(weight(p + "mlp.c_proj.weight", {C, 4 * C}, ParallelHint::row, residual_std));
  specs.push_back(bias(p + "mlp.c_proj.bias", C, ParallelHint::replicated));
  return specs;
}

}  // namespace

GptModel::GptModel(const GptConfig& config, at::Device device, bool allocate) : config_(config) {
  if (config.family == ModelFamily::llama) {
    add_llama_units(device, allocate);
    return;
  }
  const int64_t C = config.n_embd;
  units_.emplace_back(
      "embedding", UnitKind::embedding,
      std::vector<ParamSpec>{
          {"wte.weight", ParamRole::embedding, ParallelHint::vocab, {config.vocab_size, C}, InitKind::normal, 0.02},
          {"wpe.weight", ParamRole::embedding, ParallelHint::replicated, {config.seq_len, C}, InitKind::normal, 0.02}},
      device, allocate);
  for (int64_t layer = 0; layer < config.n_layer; ++layer) {
    units_.emplace_back("block." + std::to_string(layer), UnitKind::block, block_specs(config, layer), device, allocate);
  }
  units_.emplace_back("head", UnitKind::head, layer_norm("ln_f", C), device, allocate);
  block_layout_ = BlockLayout::resolve(units_[1]);
}

// Every block has the same parameter order, so the indices found in block 0
// serve all of them and forward never compares names.
GptModel::BlockLayout GptModel::BlockLayout::resolve(const Unit& block) {
  auto index_of = [&](const char* suffix) { return param_index_by_suffix(block, suffix); };
  BlockLayout L;
  L.ln_1_weight = index_of(".ln_1.weight");
  L.ln_1_bias = index_of(".ln_1.bias");
  L.attn_weight = index_of(".attn.c_attn.weight");
  L.attn_bias = index_of(".attn.c_attn.bias");
  L.attn_proj_weight = index_of(".attn.c_proj.weight");
  L.attn_proj_bias = index_of(".attn.c_proj.bias");
  L.ln_2_weight = index_of(".ln_2.weight");
  L.ln_2_bias = index_of(".ln_2.bias");
  L.fc_weight = index_of(".mlp.c_fc.weight");
  L.fc_bias = index_of(".mlp.c_fc.bias");
  L.mlp_proj_weight = index_of(".mlp.c_proj.weight");
  L.mlp_proj_bias = index_of(".mlp.c_proj.bias");
  return L;
}

int64_t GptModel::num_parameters() const {
  int64_t n = 0;
  for (const Unit& u : units_) n += u.numel();
  return n;
}

void GptModel::initialise(uint64_t seed) {
  param_init_ = initial_weights_ ? ParamInit(seed, initial_weights_) : ParamInit(seed);
  initial_weights_.reset();  // param_init_ holds them until release_initial_weights()
  for (Unit& u : units_) {
    if (u.has_params()) u.initialise(param_init_);
  }
}

void GptModel::set_initial_weights(std::shared_ptr<const WeightSource> weights) {
  const std::map<std::string, std::vector<int64_t>> shapes = weights->shapes();
  size_t matched = 0;
  for (const Unit& u : units_) {
    for (const Param& p : u.params()) {
      const auto found = shapes.find(p.spec.name);
      if (found == shapes.end()) throw std::invalid_argument("the initial weights have no " + p.spec.name);
      if (found->second != p.spec.shape) {
        throw std::invalid_argument("initial weight " + p.spec.name + " is " + c10::str(at::IntArrayRef(found->second)) +
                                    ", the model needs " + c10::str(at::IntArrayRef(p.spec.shape)));
      }
      ++matched;
    }
  }
  if (matched != shapes.size()) {
    for (const auto& [name, shape] : shapes) {
      bool known = false;
      for (const Unit& u : units_) {
        for (const Param& p : u.params()) known |= p.spec.name == name;
      }
      if (!known) throw std::invalid_argument("initial weight " + name + " is not a parameter of this model");
    }
  }
  initial_weights_ = std::move(weights);
}

void GptModel::set_initial_weights(std::shared_ptr<const NamedWeights> weights) {
  set_initial_weights(std::make_shared<const NamedWeightSource>(std::move(weights)));
}

void GptModel::zero_grads() {
  for (Unit& u : units_) u.zero_grads();
}

// Activations are sequence-major, [seq, batch, hidden] (accel/model.h,
// Megatron's layout): a sequence-parallel shard is a leading, contiguous slice.
at::Tensor GptModel::embed(const Unit& unit, const at::Tensor& tokens, int64_t offset) const {
  const int64_t T = tokens.size(1);
  if (offset + T > config_.seq_len) {
    throw std::invalid_argument("sequence of " + std::to_string(offset + T) + " tokens exceeds seq_len " +
                                std::to_string(config_.seq_len));
  }
  if (config_.family == ModelFamily::llama) {  // no learned positions: the blocks rotate q and k
    const Param& table = unit.param("embed_tokens.weight");
    at::Tensor x;
    if (context_group_.active()) {
      x = embed_context_part(unit, tokens);
    } else if (!tensor_group_.active()) {
      x = at::embedding(table.value, tokens.t());
    } else {
      x = vocab_parallel_embedding(table.value, tokens.t(), table.split.local_offset(table.spec.shape), tensor_group_);
    }
    if (config_.block.scale_embeddings) x = scaled_embeddings(x, config_.n_embd);  // Gemma's
    // Granite's embedding_multiplier (transformers scales the looked-up rows).
    return config_.embedding_multiplier == 1.0 ? x : x * config_.embedding_multiplier;
  }
  if (context_group_.active()) return embed_context_part(unit, tokens);
  const at::Tensor positions_first = tokens.t();  // [T, B]
  const Param& wte = unit.param("wte.weight");
  const at::Tensor& wpe = unit.param("wpe.weight").value;
  const TensorGroup& tp = tensor_group_;
  if (!tp.active()) return at::embedding(wte.value, positions_first) + wpe.narrow(0, offset, T).unsqueeze(1);
  const at::Tensor x =
      vocab_parallel_embedding(wte.value, positions_first, wte.split.local_offset(wte.spec.shape), tp);
  if (!tp.sequence_split()) return x + wpe.narrow(0, 0, T).unsqueeze(1);
  // This rank's positions only: wpe's gradient is partial, summed over the
  // tensor group by the strategy (as Megatron does for sequence-parallel norms).
  const int64_t local = x.size(0);
  return x + wpe.narrow(0, tp.rank * local, local).unsqueeze(1);
}

// Context parallelism: this rank's tokens only, each at its global position
// (GPT-2's learned positions; Llama's blocks rotate by the same positions).
at::Tensor GptModel::embed_context_part(const Unit& unit, const at::Tensor& tokens) const {
  at::Tensor positions = context_group_.positions(tokens.size(1), tokens.device());
  const at::Tensor local_first = tokens.index_select(1, positions).t();  // [T / C, B]
  const bool llama = config_.family == ModelFamily::llama;
  const Param& table = unit.param(llama ? "embed_tokens.weight" : "wte.weight");
  const TensorGroup& tp = tensor_group_;
  const at::Tensor x = tp.active() ? vocab_parallel_embedding(table.value, local_first,
                                                              table.split.local_offset(table.spec.shape), tp)
                                   : at::embedding(table.value, local_first);
  if (llama) return x;
  // Under sequence parallelism this rank's slice of the context part.
  if (tp.sequence_split()) positions = positions.narrow(0, tp.rank * x.size(0), x.size(0));
  return x + unit.param("wpe.weight").value.index_select(0, positions).unsqueeze(1);
}

at::Tensor GptModel::attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const std::optional<at::Tensor>& mask, bool causal, std::optional<double> scale) const {
  // (runtime/context_parallel_plan.cpp refuses a scale of its own)
  if (context_group_.active()) return context_attention(q, k, v, context_group_);
  return at::scaled_dot_product_attention(q, k, v, mask, /*dropout_p=*/0.0, causal, scale);
}

at::Tensor GptModel::local_targets(const at::Tensor& targets) const {
  if (!context_group_.active()) return targets;
  return targets.index_select(1, context_group_.positions(targets.size(1), targets.device()));
}

at::Tensor GptModel::block(const Unit& unit, const at::Tensor& x, KvCache* cache, size_t layer) const {
  if (config_.family == ModelFamily::llama) {
    return llama_block(unit, x, cache, layer, cache ? cache->length : 0);
  }
  const auto& p = unit.params();
  const BlockLayout& L = block_layout_;
  const auto unit_index = static_cast<int32_t>(&unit - units_.data());
  auto linear = [&](const at::Tensor& in, size_t weight, const at::Tensor& bias) {
    if (!linear_) return at::linear(in, p[weight].value, bias);
    return linear_(in, p[weight].value, bias, unit_index, static_cast<int32_t>(weight));
  };
  // Tensor parallel (Megatron): c_attn and c_fc are column-parallel (f before
  // them), c_proj row-parallel (g after, then its replicated bias); this rank
  // runs H/T heads and 4C/T MLP features. With sequence parallelism the
  // all-gather / reduce-scatter pair replaces f / g and everything outside
  // the linears holds a sequence slice. Unsplit, all of them are identities.
  const TensorGroup& tp = tensor_group_;
  auto column = [&](const at::Tensor& in, size_t weight, size_t bias) {
    const at::Tensor full = tp.sequence_split() ? gather_from_sequence_region(in, tp) : copy_to_tensor_region(in, tp);
    return linear(full, weight, p[bias].value);
  };
  auto row = [&](const at::Tensor& in, size_t weight, size_t bias) {
    if (!tp.active()) return linear(in, weight, p[bias].value);
    const at::Tensor partial = linear(in, weight, at::Tensor());
    return (tp.sequence_split() ? reduce_scatter_to_sequence_region(partial, tp)
                                : reduce_from_tensor_region(partial, tp)) +
           p[bias].value;
  };
  const int64_t C = config_.n_embd;
  const int64_t local_C = p[L.attn_weight].shape[0] / 3, H = config_.n_head * local_C / C;
  at::Tensor h = add_norm(x, at::Tensor(), p[L.ln_1_weight].value, p[L.ln_1_bias].value).normed;
  at::Tensor qkv = column(h, L.attn_weight, L.attn_bias);  // [T, B, 3 local_C], the whole sequence
  const int64_t T = qkv.size(0), B = qkv.size(1);
  auto parts = qkv.split(local_C, 2);
  auto heads = [&](const at::Tensor& t) { return t.view({T, B, H, local_C / H}).permute({1, 2, 0, 3}); };
  at::Tensor keys = heads(parts[1]), values = heads(parts[2]);
  bool causal = true;
  std::optional<at::Tensor> mask;  // (an undefined tensor is not "no mask" to SDPA)
  if (cache) mask = append_to_cache(cache->keys.at(layer), cache->values.at(layer), keys, values, causal);
  at::Tensor y = attention(heads(parts[0]), keys, values, mask, causal);
  y = y.permute({2, 0, 1, 3}).reshape({T, B, local_C});
  const fused::AddNorm attended =
      add_norm(x, row(y, L.attn_proj_weight, L.attn_proj_bias), p[L.ln_2_weight].value, p[L.ln_2_bias].value);
  h = at::gelu(column(attended.normed, L.fc_weight, L.fc_bias), "tanh");
  return attended.sum + row(h, L.mlp_proj_weight, L.mlp_proj_bias);
}

at::Tensor GptModel::head(const Unit& unit, const at::Tensor& x) const {
  if (config_.family == ModelFamily::llama) return llama_head(unit, x);
  at::Tensor h = add_norm(x, at::Tensor(), unit.param("ln_f.weight").value, unit.param("ln_f.bias").value).normed;
  // Tied head: logits [T, B, V] against the token embedding of unit 0
  // (vocab-parallel: this rank's rows of it, after f or the sequence gather).
  const TensorGroup& tp = tensor_group_;
  h = tp.sequence_split() ? gather_from_sequence_region(h, tp) : copy_to_tensor_region(h, tp);
  return vocab_projection(h, units_.front().param("wte.weight").value);
}

at::Tensor GptModel::forward_unit(size_t index, const at::Tensor& input) const {
  const Unit& unit = units_.at(index);
  switch (unit.kind()) {
    case UnitKind::embedding: return embed(unit, input);
    case UnitKind::block: return block(unit, input);
    case UnitKind::head: return head(unit, input);
  }
  throw std::logic_error("unknown unit kind");
}

at::Tensor GptModel::forward_cached(const at::Tensor& tokens, KvCache& cache) const {
  if (tensor_group_.active() || context_group_.active() || linear_) {
    throw std::logic_error("forward_cached runs the whole model in one process, without plugins");
  }
  const auto blocks = static_cast<size_t>(config_.n_layer);
  cache.keys.resize(blocks);
  cache.values.resize(blocks);
  at::Tensor x = embed(units_.front(), tokens, cache.length);
  for (size_t layer = 0; layer < blocks; ++layer) x = block(units_.at(layer + 1), x, &cache, layer);
  cache.length += tokens.size(1);
  return head(units_.back(), x);
}

at::Tensor GptModel::forward(const at::Tensor& tokens) const {
  at::Tensor x = tokens;
  for (size_t i = 0; i < units_.size(); ++i) x = forward_unit(i, x);
  return x;
}

at::Tensor GptModel::loss(const at::Tensor& tokens, const at::Tensor& targets) const {
  return loss_from_logits(forward(tokens), targets);
}

at::Tensor GptModel::loss_from_logits(const at::Tensor& logits, const at::Tensor& targets) const {
  const at::Tensor positions_first = local_targets(targets).t();  // logits are [T, B, V]
  if (tensor_group_.active()) {
    // The vocabulary rows this rank's logits cover: the tied wte's, or lm_head's.
    const Param& wte = head_tied_to_embedding() ? units_.front().param(token_embedding_name())
                                                : units_.back().param("lm_head.weight");
    return vocab_parallel_cross_entropy(logits, positions_first, wte.split.local_offset(wte.spec.shape),
                                        config_.vocab_size, tensor_group_);
  }
  return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}).to(at::kFloat),
                                positions_first.reshape({-1}));
}

std::optional<LossAndGrad> GptModel::loss_and_logit_grad(const at::Tensor& logits, const at::Tensor& targets,
                                                          double multiplier) const {
  if (tensor_group_.active()) return std::nullopt;
  const at::Tensor labels = local_targets(targets).t();  // logits are [T, B, V]
  if (fused_for(logits) && fused::cross_entropy_supported(logits, labels)) {
    return fused::cross_entropy_with_grad(logits, labels, multiplier);
  }
  if (!logits.is_cuda()) return std::nullopt;
  return cross_entropy_with_grad(logits, labels, multiplier);
}

bool GptModel::fused_for(const at::Tensor& t) const {
  switch (fused_kernels_) {
    case FusedKernels::off: return false;
    case FusedKernels::always: return true;
    case FusedKernels::automatic: return fused::fused_kernels_serve(t.device(), /*enabled=*/true);
  }
  return false;
}

fused::AddNorm GptModel::add_norm(const at::Tensor& residual, const at::Tensor& delta, const at::Tensor& weight,
                                  const at::Tensor& bias) const {
  const bool layer_norm = config_.family != ModelFamily::llama;
  if (config_.block.norm_plus_one) {  // Gemma's 1 + w: ATen's composition (no fused kernel takes it)
    const at::Tensor sum = delta.defined() ? residual + delta : residual;
    return {sum, rms_norm_plus_one(sum, weight, config_.norm_eps)};
  }
  if (fused_for(residual) && fused::add_norm_supported(residual, delta, weight, bias)) {
    fused::AddNorm out = fused::add_norm(residual, delta, weight, bias, config_.norm_eps, layer_norm,
                                         normed_type(residual, weight));
    if (!out.sum.defined()) out.sum = residual;
    return out;
  }
  const at::Tensor sum = delta.defined() ? residual + delta : residual;
  return {sum, layer_norm ? at::layer_norm(sum, {sum.size(-1)}, weight, bias, config_.norm_eps)
                          : rms_norm(sum, weight, config_.norm_eps)};
}

at::ScalarType GptModel::normed_type(const at::Tensor& residual, const at::Tensor& weight) const {
  // ATen's: layer_norm keeps the input's type; LlamaRMSNorm multiplies the
  // weight by the normed input in the input's type.
  const at::ScalarType natural = config_.family == ModelFamily::llama
                                     ? at::promote_types(weight.scalar_type(), residual.scalar_type())
                                     : residual.scalar_type();
  const at::DeviceType device = residual.device().type();
  if (linear_ || tensor_group_.active() || !at::autocast::is_autocast_enabled(device)) return natural;
  return at::autocast::get_autocast_dtype(device);
}

}  // namespace accel::model
