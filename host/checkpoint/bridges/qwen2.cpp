// Qwen2 (Qwen2ForCausalLM): Llama's block with q, k and v biases, its
// embeddings tied or not (Qwen2.5 0.5B-3B tie them); sliding-window
// attention off.
#include "host/checkpoint/bridges/bridge_support.h"

namespace accel::checkpoint::bridge {

const HfBridge& qwen2_bridge();

namespace {

HfModelConfig read(const JsonFields& config) {
  require_architectures(config, {"Qwen2ForCausalLM", "Qwen2Model"}, "Qwen2ForCausalLM");
  ModelOverrides o = rotary_decoder_shape(config, {"Qwen2", /*head_dim=*/false, /*tied=*/true});
  o.qkv_bias = true;  // Qwen2's attention always has them
  require_full_attention(config);
  HfModelConfig out;
  note_dropout(config, "attention_dropout", out.ignored);
  out.shape = build_shape(config.where(), "llama-tiny", o);
  return out;
}

bool writes(const model::GptConfig& shape) {
  return shape.qkv_bias && dense_rotary_decoder_with(shape, {.qkv_bias = true, .tied = true});
}

std::string config_json(const model::GptConfig& shape, const HfConfigKeys& /*keys*/) {
  nlohmann::json config = rotary_decoder_json(shape, qwen2_bridge());
  add_full_attention_keys(config);
  return config.dump(2) + "\n";
}

}  // namespace

const HfBridge& qwen2_bridge() {
  static const HfBridge bridge{"qwen2", "Qwen2ForCausalLM", "Qwen2", HfWeightNames::llama, read, writes, config_json};
  return bridge;
}

}  // namespace accel::checkpoint::bridge
