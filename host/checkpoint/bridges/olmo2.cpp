// OLMo 2 (Olmo2ForCausalLM): Llama's attention and SwiGLU with the norms
// after each sub-layer instead of before (post_attention_layernorm on the
// attention's output, post_feedforward_layernorm on the MLP's, none on
// their inputs), and q and k RMSNormed over the whole projection
// (q_norm [n_head * head_dim], k_norm [n_kv_head * head_dim]) before the
// rotation; untied head by default.
#include "host/checkpoint/bridges/bridge_support.h"

namespace accel::checkpoint::bridge {

const HfBridge& olmo2_bridge();

namespace {

BlockChoices olmo2_block() {
  BlockChoices b;
  b.norm_placement = BlockChoices::NormPlacement::post;
  b.qk_norm_whole = true;
  return b;
}

HfModelConfig read(const JsonFields& config) {
  require_architectures(config, {"Olmo2ForCausalLM", "Olmo2Model"}, "Olmo2ForCausalLM");
  ModelOverrides o = rotary_decoder_shape(config, {"Olmo2", /*head_dim=*/true, /*tied=*/true});
  // Olmo2Config's epsilon default is Llama's 1e-5, not 1e-6.
  if (!config.has_value("rms_norm_eps")) o.norm_eps = 1e-5;
  o.block = olmo2_block();
  HfModelConfig out;
  note_dropout(config, "attention_dropout", out.ignored);
  out.shape = build_shape(config.where(), "llama-tiny", o);
  return out;
}

bool writes(const model::GptConfig& shape) {
  return shape.block == olmo2_block() && dense_rotary_decoder_with(shape, {.head_dim = true, .tied = true, .block = true});
}

std::string config_json(const model::GptConfig& shape, const HfConfigKeys& /*keys*/) {
  nlohmann::json config = rotary_decoder_json(shape, olmo2_bridge());
  if (shape.head_dim > 0) config["head_dim"] = shape.head_dim;  // Olmo2Config reads it when present
  config["attention_bias"] = false;
  return config.dump(2) + "\n";
}

}  // namespace

const HfBridge& olmo2_bridge() {
  static const HfBridge bridge{"olmo2", "Olmo2ForCausalLM", "Olmo2", HfWeightNames::llama, read, writes, config_json};
  return bridge;
}

}  // namespace accel::checkpoint::bridge
