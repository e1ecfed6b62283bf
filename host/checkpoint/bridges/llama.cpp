// Llama (LlamaForCausalLM): the rotary decoder as it is, with Llama 3.1's
// rope_scaling (rope_type llama3), Llama 3.2's tied embeddings and a
// head_dim of its own.
#include "host/checkpoint/bridges/bridge_support.h"

namespace accel::checkpoint::bridge {

const HfBridge& llama_bridge();

namespace {

HfModelConfig read(const JsonFields& config) {
  require_architectures(config, {"LlamaForCausalLM", "LlamaModel"}, "LlamaForCausalLM");
  const ModelOverrides o = rotary_decoder_shape(config, {"Llama", /*head_dim=*/true, /*tied=*/true});
  HfModelConfig out;
  note_dropout(config, "attention_dropout", out.ignored);
  out.shape = build_shape(config.where(), "llama-tiny", o);
  return out;
}

bool writes(const model::GptConfig& shape) {
  return dense_rotary_decoder_with(shape, {.head_dim = true, .tied = true});
}

std::string config_json(const model::GptConfig& shape, const HfConfigKeys& /*keys*/) {
  nlohmann::json config = rotary_decoder_json(shape, llama_bridge());
  config["head_dim"] = shape.attention_head_dim();
  config["attention_bias"] = false;
  config["mlp_bias"] = false;
  config["pretraining_tp"] = 1;
  return config.dump(2) + "\n";
}

}  // namespace

const HfBridge& llama_bridge() {
  static const HfBridge bridge{"llama", "LlamaForCausalLM", "Llama", HfWeightNames::llama, read, writes, config_json};
  return bridge;
}

}  // namespace accel::checkpoint::bridge
