// Granite 3 (GraniteForCausalLM): Llama's block with four scalars — the
// embeddings multiplied by embedding_multiplier, each attention and MLP
// output by residual_multiplier before it joins the residual stream, the
// logits divided by logits_scaling, and attention_multiplier the softmax
// scale (in place of 1 / sqrt(head_dim); GraniteConfig's default is 1).
#include "host/checkpoint/bridges/bridge_support.h"

namespace accel::checkpoint::bridge {

const HfBridge& granite_bridge();

namespace {

double scalar(const JsonFields& config, const char* key) {
  return config.has_value(key) ? config.positive_finite(key) : 1.0;
}

HfModelConfig read(const JsonFields& config) {
  require_architectures(config, {"GraniteForCausalLM", "GraniteModel"}, "GraniteForCausalLM");
  ModelOverrides o = rotary_decoder_shape(config, {.family = "Granite", .tied = true});
  o.embedding_multiplier = scalar(config, "embedding_multiplier");
  o.residual_multiplier = scalar(config, "residual_multiplier");
  o.logits_scaling = scalar(config, "logits_scaling");
  o.attention_multiplier = scalar(config, "attention_multiplier");
  HfModelConfig out;
  note_dropout(config, "attention_dropout", out.ignored);
  out.shape = build_shape(config.where(), "llama-tiny", o);
  return out;
}

bool writes(const model::GptConfig& shape) {
  return shape.attention_multiplier > 0.0 && dense_rotary_decoder_with(shape, {.tied = true, .multipliers = true});
}

std::string config_json(const model::GptConfig& shape, const HfConfigKeys& /*keys*/) {
  nlohmann::json config = rotary_decoder_json(shape, granite_bridge());
  config["embedding_multiplier"] = shape.embedding_multiplier;
  config["residual_multiplier"] = shape.residual_multiplier;
  config["logits_scaling"] = shape.logits_scaling;
  config["attention_multiplier"] = shape.attention_multiplier;
  config["attention_bias"] = false;
  config["mlp_bias"] = false;
  return config.dump(2) + "\n";
}

}  // namespace

const HfBridge& granite_bridge() {
  static const HfBridge bridge{"granite", "GraniteForCausalLM", "Granite", HfWeightNames::llama, read, writes,
                               config_json};
  return bridge;
}

}  // namespace accel::checkpoint::bridge
