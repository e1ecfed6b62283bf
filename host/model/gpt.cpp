// GPT-2 as units (see gpt.h).
#include "host/model/gpt.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace accel::model {
namespace {

constexpr double kLayerNormEps = 1e-5;

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
  auto index_of = [&](const char* suffix) {
    const auto& params = block.params();
    for (size_t i = 0; i < params.size(); ++i) {
      const std::string& name = params[i].spec.name;
      if (name.size() > std::strlen(suffix) &&
          name.compare(name.size() - std::strlen(suffix), std::string::npos, suffix) == 0) {
        return i;
      }
    }
    throw std::logic_error(std::string("block has no parameter ") + suffix);
  };
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

void GptModel::set_initial_weights(std::shared_ptr<const NamedWeights> weights) {
  size_t matched = 0;
  for (const Unit& u : units_) {
    for (const Param& p : u.params()) {
      const auto found = weights->find(p.spec.name);
      if (found == weights->end()) throw std::invalid_argument("the initial weights have no " + p.spec.name);
      const at::Tensor& t = found->second;
      if (t.sizes() != at::IntArrayRef(p.spec.shape) || t.scalar_type() != at::kFloat || !t.is_contiguous() ||
          !t.is_cpu()) {
        throw std::invalid_argument("initial weight " + p.spec.name + " is " + c10::toString(t.scalar_type()) + " " +
                                    c10::str(t.sizes()) + ", the model needs Float " + c10::str(at::IntArrayRef(p.spec.shape)));
      }
      ++matched;
    }
  }
  if (matched != weights->size()) {
    for (const auto& [name, tensor] : *weights) {
      bool known = false;
      for (const Unit& u : units_) {
        for (const Param& p : u.params()) known |= p.spec.name == name;
      }
      if (!known) throw std::invalid_argument("initial weight " + name + " is not a parameter of this model");
    }
  }
  initial_weights_ = std::move(weights);
}

void GptModel::zero_grads() {
  for (Unit& u : units_) u.zero_grads();
}

at::Tensor GptModel::embed(const Unit& unit, const at::Tensor& tokens) const {
  const int64_t T = tokens.size(1);
  if (T > config_.seq_len) {
    throw std::invalid_argument("sequence of " + std::to_string(T) + " tokens exceeds seq_len " +
                                std::to_string(config_.seq_len));
  }
  const at::Tensor& wte = unit.param("wte.weight").value;
  const at::Tensor& wpe = unit.param("wpe.weight").value;
  return at::embedding(wte, tokens) + wpe.narrow(0, 0, T);
}

at::Tensor GptModel::block(const Unit& unit, const at::Tensor& x) const {
  const auto& p = unit.params();
  const BlockLayout& L = block_layout_;
  const auto unit_index = static_cast<int32_t>(&unit - units_.data());
  auto linear = [&](const at::Tensor& in, size_t weight, size_t bias) {
    if (!linear_) return at::linear(in, p[weight].value, p[bias].value);
    return linear_(in, p[weight].value, p[bias].value, unit_index, static_cast<int32_t>(weight));
  };
  const int64_t B = x.size(0), T = x.size(1), C = config_.n_embd, H = config_.n_head;
  at::Tensor h = at::layer_norm(x, {C}, p[L.ln_1_weight].value, p[L.ln_1_bias].value, kLayerNormEps);
  at::Tensor qkv = linear(h, L.attn_weight, L.attn_bias);
  auto parts = qkv.split(C, 2);
  auto heads = [&](const at::Tensor& t) { return t.view({B, T, H, C / H}).transpose(1, 2); };
  at::Tensor y = at::scaled_dot_product_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]),
                                                  /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                                  /*is_causal=*/true);
  y = y.transpose(1, 2).reshape({B, T, C});
  at::Tensor out = x + linear(y, L.attn_proj_weight, L.attn_proj_bias);
  h = at::layer_norm(out, {C}, p[L.ln_2_weight].value, p[L.ln_2_bias].value, kLayerNormEps);
  h = at::gelu(linear(h, L.fc_weight, L.fc_bias), "tanh");
  return out + linear(h, L.mlp_proj_weight, L.mlp_proj_bias);
}

at::Tensor GptModel::head(const Unit& unit, const at::Tensor& x) const {
  at::Tensor h = at::layer_norm(x, {config_.n_embd}, unit.param("ln_f.weight").value,
                                unit.param("ln_f.bias").value, kLayerNormEps);
  // Tied head: logits against the token embedding of unit 0.
  return at::linear(h, units_.front().param("wte.weight").value);
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

at::Tensor GptModel::forward(const at::Tensor& tokens) const {
  at::Tensor x = tokens;
  for (size_t i = 0; i < units_.size(); ++i) x = forward_unit(i, x);
  return x;
}

at::Tensor GptModel::loss(const at::Tensor& tokens, const at::Tensor& targets) const {
  at::Tensor logits = forward(tokens);
  return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}).to(at::kFloat),
                                targets.reshape({-1}));
}

}  // namespace accel::model
