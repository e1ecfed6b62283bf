// Mistral (MistralForCausalLM): Llama's block with sliding-window attention
// (each query sees the sliding_window most recent positions, itself
// included; null: the whole prefix, as v0.3) and a head_dim of its own.
// A Mistral without a window computes what a Llama does, and export-hf
// writes it as one.
#include "host/checkpoint/bridges/bridge_support.h"
#include "host/model/model_limits.h"

namespace accel::checkpoint::bridge {

const HfBridge& mistral_bridge();

namespace {

HfModelConfig read(const JsonFields& config) {
  require_architectures(config, {"MistralForCausalLM", "MistralModel"}, "MistralForCausalLM");
  ModelOverrides o = rotary_decoder_shape(config, {"Mistral", /*head_dim=*/true, /*tied=*/true});
  o.sliding_window = config.optional_integer("sliding_window", 1, model::kMaxModelDimension).value_or(0);
  HfModelConfig out;
  note_dropout(config, "attention_dropout", out.ignored);
  out.shape = build_shape(config.where(), "llama-tiny", o);
  return out;
}

bool writes(const model::GptConfig& shape) {
  return shape.sliding_window > 0 &&
         dense_rotary_decoder_with(shape, {.head_dim = true, .tied = true, .sliding_window = true});
}

std::string config_json(const model::GptConfig& shape, const HfConfigKeys& /*keys*/) {
  nlohmann::json config = rotary_decoder_json(shape, mistral_bridge());
  config["head_dim"] = shape.attention_head_dim();
  config["sliding_window"] = shape.sliding_window;
  return config.dump(2) + "\n";
}

}  // namespace

const HfBridge& mistral_bridge() {
  static const HfBridge bridge{"mistral", "MistralForCausalLM", "Mistral", HfWeightNames::llama, read, writes,
                               config_json};
  return bridge;
}

}  // namespace accel::checkpoint::bridge
