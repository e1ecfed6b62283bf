// The Gemma bridges' shared reader and writer (see gemma_common.h).
#include "host/checkpoint/bridges/gemma_common.h"

#include <cmath>
#include <string>

#include "host/model/model_limits.h"
#include "host/util/strformat.h"

namespace accel::checkpoint::bridge {

using nlohmann::json;

ModelOverrides read_gemma_shape(const JsonFields& config, const GemmaDefaults& d) {
  const std::string family = d.family;
  // The classes' defaults (head_dim 256, 4 key/value heads) are no
  // function of the width: a file without them is refused, not guessed.
  for (const char* key : {"head_dim", "num_key_value_heads"}) {
    if (!config.has_value(key)) config.fail(key, "is missing (" + family + "Config writes it)");
  }
  ModelOverrides o = rotary_decoder_shape(
      config, {d.family, /*head_dim=*/true, /*tied=*/true, /*own_activation=*/true, d.own_rope});
  // Gemma ties its head unless the file says otherwise.
  o.tie_embeddings = !config.has_value("tie_word_embeddings") || config.boolean("tie_word_embeddings");
  // transformers' Gemma reads hidden_activation (an old hidden_act beside it is unused).
  require_string(config, "hidden_activation", {"gelu_pytorch_tanh"},
                 "accel-host's " + family + " uses gelu_pytorch_tanh (GeGLU with the tanh GELU)");
  require_boolean(config, "use_bidirectional_attention", false, "accel-host's " + family + " attends causally");
  BlockChoices b;
  b.norm_placement = BlockChoices::NormPlacement::sandwich;
  b.norm_plus_one = true;
  b.mlp_activation = BlockChoices::MlpActivation::gelu_tanh;
  b.scale_embeddings = true;
  b.query_pre_attn_scalar =
      config.has_value("query_pre_attn_scalar") ? config.positive_finite("query_pre_attn_scalar") : 256.0;
  // A scalar equal to head_dim is the default scale: kept as the default, so
  // what serves only that (context parallelism's ring) serves it.
  const int64_t head_dim = *o.head_dim > 0 ? *o.head_dim : *o.n_embd / *o.n_head;
  if (b.query_pre_attn_scalar == static_cast<double>(head_dim)) b.query_pre_attn_scalar = 0.0;
  b.final_logit_softcap = !config.contains("final_logit_softcapping") ? d.final_logit_softcap
                          : config.has_value("final_logit_softcapping")
                              ? config.positive_finite("final_logit_softcapping")
                              : 0.0;
  // The window (null: none), and which layers take it.
  o.sliding_window = !config.contains("sliding_window")
                         ? 4096
                         : config.optional_integer("sliding_window", 1, model::kMaxModelDimension).value_or(0);
  // The configs' own rule without layer_types: every pattern-th layer attends fully.
  const int64_t pattern =
      d.reads_pattern
          ? config.optional_integer("sliding_window_pattern", 1, model::kMaxModelDimension).value_or(d.sliding_pattern)
          : d.sliding_pattern;
  b.sliding_layers = read_sliding_layers(config, *o.n_layer, pattern, family);
  bool any_sliding = false;
  for (const bool sliding : b.sliding_layers) any_sliding = any_sliding || sliding;
  if (any_sliding && *o.sliding_window == 0) {
    config.fail("sliding_window", "is null, but layer_types has sliding_attention layers");
  }
  o.block = b;
  return o;
}

bool gemma_block(const model::GptConfig& shape) {
  const BlockChoices& b = shape.block;
  return dense_rotary_decoder_with(
             shape, {.head_dim = true, .tied = true, .qk_norm = true, .sliding_window = true, .block = true}) &&
         b.norm_placement == BlockChoices::NormPlacement::sandwich && b.norm_plus_one && !b.qk_norm_whole &&
         b.mlp_activation == BlockChoices::MlpActivation::gelu_tanh && b.scale_embeddings;
}

json optional_cap(double cap) { return cap > 0 ? json(cap) : json(nullptr); }

json gemma_json(const model::GptConfig& shape, const HfBridge& bridge) {
  const BlockChoices& b = shape.block;
  json config = rotary_decoder_json(shape, bridge);
  config.erase("hidden_act");
  config["hidden_activation"] = "gelu_pytorch_tanh";
  config["head_dim"] = shape.attention_head_dim();
  // Written as the integer GemmaConfig declares when it is one.
  const double scalar = b.query_pre_attn_scalar > 0 ? b.query_pre_attn_scalar
                                                    : static_cast<double>(shape.attention_head_dim());
  config["query_pre_attn_scalar"] =
      scalar == std::floor(scalar) && scalar < 9e15 ? json(static_cast<int64_t>(scalar)) : json(scalar);
  config["final_logit_softcapping"] = optional_cap(b.final_logit_softcap);
  config["sliding_window"] = shape.sliding_window > 0 ? json(shape.sliding_window) : json(nullptr);
  json types = json::array();
  for (int64_t i = 0; i < shape.n_layer; ++i) {
    types.push_back(shape.sliding_window > 0 && b.sliding_layer(i) ? "sliding_attention" : "full_attention");
  }
  config["layer_types"] = types;
  config["attention_bias"] = false;
  config["use_bidirectional_attention"] = false;
  return config;
}

}  // namespace accel::checkpoint::bridge
