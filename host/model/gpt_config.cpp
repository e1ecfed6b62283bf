// GPT presets and shape validation (see gpt_config.h).
#include "host/model/gpt_config.h"

#include <algorithm>
#include <stdexcept>

#include "host/cli/model_presets.h"
#include "host/util/strformat.h"

namespace accel::model {

const char* to_string(ModelFamily family) { return family == ModelFamily::llama ? "llama" : "gpt2"; }

}  // namespace accel::model

namespace accel {

const char* to_string(BlockChoices::NormPlacement placement) {
  switch (placement) {
    case BlockChoices::NormPlacement::pre: return "pre";
    case BlockChoices::NormPlacement::sandwich: return "sandwich";
    case BlockChoices::NormPlacement::post: return "post";
  }
  return "?";
}

const char* to_string(BlockChoices::MlpActivation activation) {
  return activation == BlockChoices::MlpActivation::gelu_tanh ? "gelu_tanh" : "silu";
}

}  // namespace accel

namespace accel::model {
namespace {

// " norm_placement=sandwich ..." for the block's choices that are not Llama's.
std::string describe_block(const BlockChoices& b) {
  std::string text;
  if (b.norm_placement != BlockChoices::NormPlacement::pre) {
    text += std::string(" norm_placement=") + to_string(b.norm_placement);
  }
  if (b.norm_plus_one) text += " norm_plus_one=true";
  if (b.qk_norm_whole) text += " qk_norm_whole=true";
  if (b.mlp_activation != BlockChoices::MlpActivation::silu) {
    text += std::string(" mlp_activation=") + to_string(b.mlp_activation);
  }
  if (b.scale_embeddings) text += " scale_embeddings=true";
  if (b.query_pre_attn_scalar > 0) text += strformat(" query_pre_attn_scalar=%g", b.query_pre_attn_scalar);
  if (b.attn_logit_softcap > 0) text += strformat(" attn_logit_softcap=%g", b.attn_logit_softcap);
  if (b.final_logit_softcap > 0) text += strformat(" final_logit_softcap=%g", b.final_logit_softcap);
  if (!b.sliding_layers.empty()) {
    text += " sliding_layers=";
    for (const bool sliding : b.sliding_layers) text += sliding ? 'S' : 'F';
  }
  if (b.rope_local_theta > 0) text += strformat(" rope_local_theta=%g", b.rope_local_theta);
  return text;
}

// The block's choices against the rest of the shape; std::invalid_argument names the field.
void validate_block(const GptConfig& c) {
  const BlockChoices& b = c.block;
  if (b.qk_norm_whole && c.qk_norm) {
    throw std::invalid_argument("qk_norm (per head) and qk_norm_whole (over the projection) exclude each other");
  }
  for (const auto& [value, name] : {std::pair{b.query_pre_attn_scalar, "query_pre_attn_scalar"},
                                    std::pair{b.attn_logit_softcap, "attn_logit_softcap"},
                                    std::pair{b.final_logit_softcap, "final_logit_softcap"},
                                    std::pair{b.rope_local_theta, "rope_local_theta"}}) {
    if (!(value >= 0.0) || value > 1e300) throw std::invalid_argument(strformat("%s %g must be >= 0", name, value));
  }
  if (c.has_experts() && (b.norm_placement != BlockChoices::NormPlacement::pre ||
                          b.mlp_activation != BlockChoices::MlpActivation::silu)) {
    throw std::invalid_argument("the experts' blocks are pre-norm SwiGLU: norm_placement and mlp_activation keep "
                                "Llama's with experts");
  }
  if (!b.sliding_layers.empty() && static_cast<int64_t>(b.sliding_layers.size()) != c.n_layer) {
    throw std::invalid_argument(strformat("sliding_layers names %lld layers; the model has %lld",
                                          static_cast<long long>(b.sliding_layers.size()),
                                          static_cast<long long>(c.n_layer)));
  }
}

// What the rotary frequencies (model/rotary.cpp) need of `scaling` for
// `rotated` features: longrope one factor per frequency, a positive length.
void check_rope_scaling(const RopeScaling& r, int64_t rotated) {
  using Kind = RopeScaling::Kind;
  if (r.kind == Kind::none) return;
  if (!(r.factor > 0.0) || (r.kind != Kind::linear && r.original_max_position < 1)) {
    throw std::invalid_argument(strformat("rope_scaling %s needs factor > 0 and original_max_position_embeddings >= 1",
                                          to_string(r.kind)));
  }
  if (r.kind == Kind::dynamic && rotated < 4) {
    throw std::invalid_argument("rope_scaling dynamic needs at least 4 rotated features per head");
  }
  if (r.kind == Kind::longrope) {
    const auto half = static_cast<size_t>(rotated / 2);
    if (r.short_factor.size() != half || r.long_factor.size() != half) {
      throw std::invalid_argument(strformat("rope_scaling longrope: short_factor and long_factor need %zu entries "
                                            "(one per rotated frequency), got %zu and %zu",
                                            half, r.short_factor.size(), r.long_factor.size()));
    }
  }
}

}  // namespace

std::string GptConfig::describe() const {
  std::string text = strformat("n_layer=%lld n_head=%lld n_embd=%lld seq_len=%lld vocab_size=%lld",
                               static_cast<long long>(n_layer), static_cast<long long>(n_head),
                               static_cast<long long>(n_embd), static_cast<long long>(seq_len),
                               static_cast<long long>(vocab_size));
  if (family == ModelFamily::llama) {
    text = strformat("llama %s n_kv_head=%lld ffn_size=%lld rope_theta=%g norm_eps=%g", text.c_str(),
                     static_cast<long long>(n_kv_head), static_cast<long long>(ffn_size), rope_theta, norm_eps);
    if (qkv_bias) text += " qkv_bias=true";
    if (head_dim > 0) text += strformat(" head_dim=%lld", static_cast<long long>(head_dim));
    if (qk_norm) text += " qk_norm=true";
    if (tie_embeddings) text += " tie_embeddings=true";
    if (sliding_window > 0) text += strformat(" sliding_window=%lld", static_cast<long long>(sliding_window));
    text += describe_block(block);
    if (rope_scaling.kind == RopeScaling::Kind::linear) text += strformat(" rope_scaling=linear(factor=%g)", rope_scaling.factor);
    if (rope_scaling.kind == RopeScaling::Kind::llama3) {
      text += strformat(" rope_scaling=llama3(factor=%g,low_freq_factor=%g,high_freq_factor=%g,"
                        "original_max_position=%lld)",
                        rope_scaling.factor, rope_scaling.low_freq_factor, rope_scaling.high_freq_factor,
                        static_cast<long long>(rope_scaling.original_max_position));
    } else if (rope_scaling.kind != RopeScaling::Kind::none) {
      text += strformat(" rope_scaling=%s(factor=%g,original_max_position=%lld)", to_string(rope_scaling.kind),
                        rope_scaling.factor, static_cast<long long>(rope_scaling.original_max_position));
    }
    if (partial_rotary_factor != 1.0) text += strformat(" partial_rotary_factor=%g", partial_rotary_factor);
    if (!nope_layers.empty()) {
      text += " nope_layers=";
      for (size_t i = 0; i < nope_layers.size(); ++i) {
        text += (i ? "," : "") + std::to_string(nope_layers[i]);
      }
    }
    if (embedding_multiplier != 1.0) text += strformat(" embedding_multiplier=%g", embedding_multiplier);
    if (query_position_scale_beta != 0.0) {
      text += strformat(" query_position_scale_beta=%g", query_position_scale_beta);
    }
    if (residual_multiplier != 1.0) text += strformat(" residual_multiplier=%g", residual_multiplier);
    if (logits_scaling != 1.0) text += strformat(" logits_scaling=%g", logits_scaling);
    if (attention_multiplier != 0.0) text += strformat(" attention_multiplier=%g", attention_multiplier);
  }
  if (has_experts()) {
    text += strformat(" n_experts=%lld experts_per_token=%lld", static_cast<long long>(n_experts),
                      static_cast<long long>(experts_per_token));
    if (shared_expert_size > 0) text += strformat(" shared_expert_size=%lld", static_cast<long long>(shared_expert_size));
    if (!normalize_top_k) text += " normalize_top_k=false";
  }
  return text;
}

GptConfig make_gpt_config(const std::string& preset, const ModelOverrides& overrides) {
  GptConfig config;
  if (preset == "gpt-tiny") {
    config = GptConfig{2, 4, 64, 64, 256};
  } else if (preset == "gpt-small") {
    config = GptConfig{12, 12, 768, 1024, 50257};
  } else if (preset == "llama-tiny") {
    config = GptConfig{2, 4, 64, 64, 256, ModelFamily::llama, 2, 176, 10000.0, 1e-5};
  } else if (preset == "llama-small") {
    config = GptConfig{8, 12, 768, 1024, 32000, ModelFamily::llama, 4, 2048, 10000.0, 1e-5};
  } else if (preset == "moe-tiny") {
    config = GptConfig{2, 4, 64, 64, 256, ModelFamily::llama, 2, 128, 10000.0, 1e-5, 4, 2};
  } else if (preset == "moe-small") {
    config = GptConfig{8, 12, 768, 1024, 32000, ModelFamily::llama, 4, 1024, 10000.0, 1e-5, 8, 2};
  } else if (preset == "llama3-tiny" || preset == "qwen2-tiny" || preset == "qwen3-tiny" || preset == "mistral-tiny" ||
             preset == "gemma2-tiny" || preset == "gemma3-tiny" || preset == "olmo2-tiny" || preset == "olmo3-tiny" || preset == "phi3-tiny" ||
             preset == "smollm3-tiny" || preset == "granite-tiny") {
    // The families' fast-test shapes: llama-tiny with each family's choices
    // (docs/architectures.md), as the small models of each family have them.
    config = GptConfig{2, 4, 64, 64, 256, ModelFamily::llama, 2, 176, 10000.0, 1e-5};
    if (preset == "llama3-tiny") {  // Llama 3.2 1B: llama3 scaling, tied head
      config.rope_scaling = RopeScaling{RopeScaling::Kind::llama3, 8.0, 1.0, 4.0, 16};
      config.tie_embeddings = true;
    } else if (preset == "qwen2-tiny") {  // Qwen2.5 0.5B: q, k and v biases, tied head
      config.qkv_bias = true;
      config.tie_embeddings = true;
    } else if (preset == "qwen3-tiny") {  // Qwen3 0.6B: per-head q/k norms, heads wider than n_embd / n_head
      config.qk_norm = true;
      config.head_dim = 24;
      config.tie_embeddings = true;
    } else if (preset == "mistral-tiny") {  // Mistral 7B v0.1: a window of a quarter of the sequence
      config.sliding_window = 16;
    } else if (preset == "gemma2-tiny" || preset == "gemma3-tiny") {
      // Gemma 2 2B: sandwich 1 + w norms, GeGLU, scaled embeddings, a softmax
      // scale of its own, a window on every other layer, tied head; Gemma 2
      // caps the attention and output logits, Gemma 3 norms q and k per head
      // and rotates its sliding layers by another base.
      BlockChoices& b = config.block;
      b.norm_placement = BlockChoices::NormPlacement::sandwich;
      b.norm_plus_one = true;
      b.mlp_activation = BlockChoices::MlpActivation::gelu_tanh;
      b.scale_embeddings = true;
      b.query_pre_attn_scalar = 24;
      b.sliding_layers = {true, false};
      config.sliding_window = 16;
      config.tie_embeddings = true;
      if (preset == "gemma2-tiny") {
        b.attn_logit_softcap = 50.0;
        b.final_logit_softcap = 30.0;
      } else {
        config.qk_norm = true;
        config.rope_theta = 1e6;
        b.rope_local_theta = 10000.0;
      }
    } else if (preset == "olmo3-tiny") {
      // OLMo 3 7B: OLMo 2's block, a window on three layers of four (here
      // the first of two), the full layers' rotation extended by yarn.
      config.block.norm_placement = BlockChoices::NormPlacement::post;
      config.block.qk_norm_whole = true;
      config.block.sliding_layers = {true, false};
      config.block.rope_local_theta = 500000.0;
      config.sliding_window = 16;
      config.rope_theta = 500000.0;
      config.rope_scaling.kind = RopeScaling::Kind::yarn;
      config.rope_scaling.factor = 4.0;
      config.rope_scaling.original_max_position = 16;
    } else if (preset == "olmo2-tiny") {  // OLMo 2 1B: norms after each sub-layer, q/k normed whole
      config.block.norm_placement = BlockChoices::NormPlacement::post;
      config.block.qk_norm_whole = true;
    } else if (preset == "phi3-tiny") {  // Phi-4-mini: longrope, 3/4 of each head rotated, tied head
      config.rope_scaling.kind = RopeScaling::Kind::longrope;
      config.rope_scaling.factor = 4.0;
      config.rope_scaling.original_max_position = 16;  // training's 64 positions take the long factors
      config.rope_scaling.short_factor = {1.0, 1.0, 1.25, 1.5, 2.0, 3.0};
      config.rope_scaling.long_factor = {1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
      config.partial_rotary_factor = 0.75;
      config.tie_embeddings = true;
    } else if (preset == "smollm3-tiny") {  // SmolLM3 3B: the last layer of each group without rotary
      config.nope_layers = {1};
      config.rope_theta = 2000000.0;
      config.tie_embeddings = true;
    } else if (preset == "granite-tiny") {  // Granite 3.0 2B's multipliers
      config.embedding_multiplier = 12.0;
      config.residual_multiplier = 0.22;
      config.logits_scaling = 8.0;
      config.attention_multiplier = 0.015625;
    }
  } else {
    throw std::invalid_argument("--model: unknown model '" + preset + "' (expected " + model_preset_list() + ")");
  }
  const bool llama = config.family == ModelFamily::llama;
  if (!llama && (overrides.n_kv_head || overrides.ffn_size || overrides.n_experts || overrides.experts_per_token ||
                 overrides.qkv_bias)) {
    const char* flag = overrides.n_kv_head ? "--n-kv-head"
                       : overrides.ffn_size ? "--ffn-size"
                       : overrides.n_experts ? "--n-experts"
                       : overrides.qkv_bias ? "--qkv-bias"
                                             : "--experts-per-token";
    throw std::invalid_argument(std::string(flag) + " shapes llama-family models; " + preset + " is GPT-2");
  }
  if (!llama && (overrides.head_dim || overrides.tie_embeddings || overrides.qk_norm || overrides.sliding_window ||
                 overrides.rope_scaling || overrides.block || overrides.partial_rotary_factor ||
                 overrides.nope_layers || overrides.embedding_multiplier || overrides.residual_multiplier ||
                 overrides.logits_scaling || overrides.attention_multiplier || overrides.query_position_scale_beta)) {
    throw std::invalid_argument("head_dim, tie_embeddings, qk_norm, sliding_window, rope_scaling and the block's "
                                "choices shape "
                                "llama-family models; " + preset + " is GPT-2");
  }
  if (overrides.head_dim) config.head_dim = *overrides.head_dim;
  if (overrides.tie_embeddings) config.tie_embeddings = *overrides.tie_embeddings;
  if (overrides.qk_norm) config.qk_norm = *overrides.qk_norm;
  if (overrides.sliding_window) config.sliding_window = *overrides.sliding_window;
  if (overrides.rope_scaling) config.rope_scaling = *overrides.rope_scaling;
  if (overrides.block) config.block = *overrides.block;
  if (overrides.partial_rotary_factor) config.partial_rotary_factor = *overrides.partial_rotary_factor;
  if (overrides.nope_layers) config.nope_layers = *overrides.nope_layers;
  if (overrides.embedding_multiplier) config.embedding_multiplier = *overrides.embedding_multiplier;
  if (overrides.residual_multiplier) config.residual_multiplier = *overrides.residual_multiplier;
  if (overrides.logits_scaling) config.logits_scaling = *overrides.logits_scaling;
  if (overrides.attention_multiplier) config.attention_multiplier = *overrides.attention_multiplier;
  if (overrides.query_position_scale_beta) config.query_position_scale_beta = *overrides.query_position_scale_beta;
  if (overrides.n_experts) config.n_experts = *overrides.n_experts;
  // Experts without a k: Mixtral's top 2 (or every expert when fewer).
  if (overrides.n_experts && !overrides.experts_per_token && config.experts_per_token == 0) {
    config.experts_per_token = std::min<int64_t>(2, config.n_experts);
  }
  if (overrides.experts_per_token) config.experts_per_token = *overrides.experts_per_token;
  if (overrides.shared_expert_size) config.shared_expert_size = *overrides.shared_expert_size;
  if (overrides.normalize_top_k) config.normalize_top_k = *overrides.normalize_top_k;
  if (config.n_experts == 0) {
    for (const auto& [given, flag] : {std::pair{overrides.experts_per_token.has_value(), "--experts-per-token"},
                                      std::pair{overrides.shared_expert_size.has_value(), "--shared-expert-size"},
                                      std::pair{overrides.normalize_top_k.has_value(), "--normalize-top-k"}}) {
      if (given) {
        throw std::invalid_argument(std::string(flag) + " needs experts: " + preset + " has a dense MLP (--n-experts)");
      }
    }
    config.experts_per_token = 0;
    config.shared_expert_size = 0;
    config.normalize_top_k = true;
  }
  if (overrides.qkv_bias) config.qkv_bias = *overrides.qkv_bias;
  if (overrides.n_kv_head) config.n_kv_head = *overrides.n_kv_head;
  if (overrides.ffn_size) config.ffn_size = *overrides.ffn_size;
  if (llama && overrides.rope_theta) config.rope_theta = *overrides.rope_theta;
  if (llama && overrides.norm_eps) config.norm_eps = *overrides.norm_eps;
  // A new head count without a key/value count keeps plain multi-head attention.
  if (llama && overrides.n_head && !overrides.n_kv_head) config.n_kv_head = *overrides.n_head;
  if (overrides.n_layer) config.n_layer = *overrides.n_layer;
  if (overrides.n_head) config.n_head = *overrides.n_head;
  if (overrides.n_embd) config.n_embd = *overrides.n_embd;
  if (overrides.seq_len) config.seq_len = *overrides.seq_len;
  if (overrides.vocab_size) config.vocab_size = *overrides.vocab_size;

  if (config.n_layer < 1) throw std::invalid_argument("--n-layer must be >= 1");
  if (config.n_head < 1) throw std::invalid_argument("--n-head must be >= 1");
  if (config.n_embd < 1 || config.n_embd % config.n_head != 0) {
    throw std::invalid_argument(strformat("--n-embd %lld must be a positive multiple of --n-head %lld",
                                          static_cast<long long>(config.n_embd),
                                          static_cast<long long>(config.n_head)));
  }
  if (llama) {
    if (config.n_kv_head < 1 || config.n_head % config.n_kv_head != 0) {
      throw std::invalid_argument(strformat("--n-head %lld must be a multiple of --n-kv-head %lld",
                                            static_cast<long long>(config.n_head),
                                            static_cast<long long>(config.n_kv_head)));
    }
    if (config.head_dim < 0) throw std::invalid_argument("head_dim must be >= 1");
    if (config.sliding_window < 0) throw std::invalid_argument("sliding_window must be >= 1");
    if (config.head_dim > 0 && config.head_dim % 2 != 0) {
      throw std::invalid_argument(strformat("rotary positions need an even head width; head_dim %lld is odd",
                                            static_cast<long long>(config.head_dim)));
    }
    if (config.head_dim == 0 && (config.n_embd / config.n_head) % 2 != 0) {
      throw std::invalid_argument(strformat("rotary positions need an even head width; --n-embd %lld / --n-head "
                                            "%lld is odd",
                                            static_cast<long long>(config.n_embd),
                                            static_cast<long long>(config.n_head)));
    }
    if (config.ffn_size < 1) throw std::invalid_argument("--ffn-size must be >= 1");
    validate_block(config);
    const int64_t rotated = config.rotary_dim();
    if (!(config.partial_rotary_factor > 0.0 && config.partial_rotary_factor <= 1.0) || rotated < 2 ||
        rotated % 2 != 0) {
      throw std::invalid_argument(strformat("partial_rotary_factor %g must lie in (0, 1] and rotate an even number "
                                            "(>= 2) of a head's %lld features",
                                            config.partial_rotary_factor,
                                            static_cast<long long>(config.attention_head_dim())));
    }
    check_rope_scaling(config.rope_scaling, rotated);
    for (size_t i = 0; i < config.nope_layers.size(); ++i) {
      const int64_t layer = config.nope_layers[i];
      if (layer < 0 || layer >= config.n_layer || (i > 0 && layer <= config.nope_layers[i - 1])) {
        throw std::invalid_argument(strformat("nope_layers must list distinct layers in [0, %lld) in ascending order",
                                              static_cast<long long>(config.n_layer)));
      }
    }
    for (const auto& [value, name] : {std::pair{config.embedding_multiplier, "embedding_multiplier"},
                                      std::pair{config.residual_multiplier, "residual_multiplier"},
                                      std::pair{config.logits_scaling, "logits_scaling"}}) {
      if (!(value > 0.0 && value < 1e30)) {
        throw std::invalid_argument(strformat("%s %g must be a positive finite number", name, value));
      }
    }
    if (!(config.query_position_scale_beta >= 0.0 && config.query_position_scale_beta < 1e30)) {
      throw std::invalid_argument(strformat("query_position_scale_beta %g must be a finite number >= 0",
                                            config.query_position_scale_beta));
    }
    if (config.query_position_scale_beta > 0.0 && config.rope_scaling.original_max_position < 1) {
      throw std::invalid_argument("query_position_scale_beta needs a rope_scaling with original_max_position_embeddings");
    }
    if (!(config.attention_multiplier >= 0.0 && config.attention_multiplier < 1e30)) {
      throw std::invalid_argument(strformat("attention_multiplier %g must be a positive finite number (0: "
                                            "1 / sqrt(head_dim))", config.attention_multiplier));
    }
    if (config.has_experts() && (config.experts_per_token < 1 || config.experts_per_token > config.n_experts)) {
      // Name the flag the user gave: a preset's value is no flag of theirs.
      const auto k = static_cast<long long>(config.experts_per_token);
      const auto experts = static_cast<long long>(config.n_experts);
      if (!overrides.experts_per_token) {
        throw std::invalid_argument(strformat("--n-experts %lld is fewer than the %lld experts each token takes in "
                                              "%s: give --experts-per-token too (1 to %lld)",
                                              experts, k, preset.c_str(), experts));
      }
      throw std::invalid_argument(
          overrides.n_experts ? strformat("--experts-per-token %lld must lie in [1, --n-experts %lld]", k, experts)
                              : strformat("--experts-per-token %lld must lie in [1, %lld] (%s's experts)", k, experts,
                                          preset.c_str()));
    }
  }
  if (config.seq_len < 1) throw std::invalid_argument("--seq-len must be >= 1");
  if (config.vocab_size < 2) throw std::invalid_argument("--vocab-size must be >= 2");
  return config;
}

int64_t count_parameters(const GptConfig& c) {
  const int64_t C = c.n_embd;
  if (c.family == ModelFamily::llama) {
    const int64_t D = c.attention_head_dim(), q = c.n_head * D, kv = c.n_kv_head * D;
    const int64_t shared = c.shared_expert_size > 0 ? 3 * C * c.shared_expert_size + C /*its gate*/ : 0;
    const int64_t mlp =
        c.has_experts() ? c.n_experts * (3 * C * c.ffn_size + C /*router row*/) + shared : 3 * C * c.ffn_size;
    const int64_t biases = c.qkv_bias ? q + 2 * kv : 0;  // q, k, v
    const int64_t qk_norms = c.qk_norm ? 2 * D : c.block.qk_norm_whole ? q + kv : 0;
    const int64_t norms = c.block.norm_placement == BlockChoices::NormPlacement::sandwich ? 4 : 2;
    const int64_t block = norms * C + 2 * q * C /*q, o*/ + 2 * kv * C /*k, v*/ + biases + qk_norms + mlp;
    const int64_t tables = (c.tie_embeddings ? 1 : 2) * c.vocab_size * C;  // embedding, untied head
    return tables + c.n_layer * block + C /*final norm*/;
  }
  const int64_t block = 2 * C /*ln_1*/ + 3 * C * C + 3 * C /*c_attn*/ + C * C + C /*attn.c_proj*/ +
                        2 * C /*ln_2*/ + 4 * C * C + 4 * C /*c_fc*/ + 4 * C * C + C /*mlp.c_proj*/;
  return c.vocab_size * C + c.seq_len * C + c.n_layer * block + 2 * C /*ln_f*/;
}

double minimum_training_bytes(const GptConfig& c, int64_t micro_batch, double bytes_per_parameter) {
  const double C = static_cast<double>(c.n_embd);
  double parameters = 0.0;  // as count_parameters, in double
  if (c.family == ModelFamily::llama) {
    const double D = static_cast<double>(c.attention_head_dim());
    const double q = static_cast<double>(c.n_head) * D, kv = D * static_cast<double>(c.n_kv_head);
    const double experts = c.has_experts() ? static_cast<double>(c.n_experts) : 1.0;
    const double router = c.has_experts() ? experts * C + 3.0 * C * static_cast<double>(c.shared_expert_size) +
                                                (c.shared_expert_size > 0 ? C : 0.0)
                                          : 0.0;
    const double norms = c.block.norm_placement == BlockChoices::NormPlacement::sandwich ? 4.0 : 2.0;
    const double block = norms * C + 2.0 * q * C + 2.0 * kv * C + experts * 3.0 * C * static_cast<double>(c.ffn_size) +
                         router;
    const double tables = c.tie_embeddings ? 1.0 : 2.0;
    parameters = tables * static_cast<double>(c.vocab_size) * C + static_cast<double>(c.n_layer) * block + C;
  } else {
    const double block = 12.0 * C * C + 13.0 * C;
    parameters = static_cast<double>(c.vocab_size) * C + static_cast<double>(c.seq_len) * C +
                 static_cast<double>(c.n_layer) * block + 2.0 * C;
  }
  const double logits = static_cast<double>(micro_batch) * static_cast<double>(c.seq_len) *
                        static_cast<double>(c.vocab_size);
  return bytes_per_parameter * parameters + 4.0 * logits;
}

}  // namespace accel::model
