// Qwen3 (Qwen3ForCausalLM): Llama's block without attention biases, each
// head of q and k RMSNormed before the rotation (q_norm, k_norm), and a
// head_dim independent of hidden_size / num_attention_heads; embeddings
// tied or not; sliding-window attention off.
#include "host/checkpoint/bridges/bridge_support.h"

namespace accel::checkpoint::bridge {

const HfBridge& qwen3_bridge();

namespace {

HfModelConfig read(const JsonFields& config) {
  require_architectures(config, {"Qwen3ForCausalLM", "Qwen3Model"}, "Qwen3ForCausalLM");
  // Qwen3Config's own default (128) is no function of the width: a file
  // without the key is refused rather than guessed.
  if (!config.has_value("head_dim")) config.fail("head_dim", "is missing (Qwen3Config writes it)");
  ModelOverrides o = rotary_decoder_shape(config, {"Qwen3", /*head_dim=*/true, /*tied=*/true});
  o.qk_norm = true;
  require_full_attention(config);
  HfModelConfig out;
  note_dropout(config, "attention_dropout", out.ignored);
  out.shape = build_shape(config.where(), "llama-tiny", o);
  return out;
}

bool writes(const model::GptConfig& shape) {
  return shape.qk_norm && dense_rotary_decoder_with(shape, {.head_dim = true, .tied = true, .qk_norm = true});
}

std::string config_json(const model::GptConfig& shape, const HfConfigKeys& /*keys*/) {
  nlohmann::json config = rotary_decoder_json(shape, qwen3_bridge());
  config["head_dim"] = shape.attention_head_dim();
  config["attention_bias"] = false;
  add_full_attention_keys(config);
  return config.dump(2) + "\n";
}

}  // namespace

const HfBridge& qwen3_bridge() {
  static const HfBridge bridge{"qwen3", "Qwen3ForCausalLM", "Qwen3", HfWeightNames::llama, read, writes, config_json};
  return bridge;
}

}  // namespace accel::checkpoint::bridge
