// Phi-3 and Phi-4 (Phi3ForCausalLM): Llama's block with q, k and v stored
// as one qkv_proj and gate and up as one gate_up_proj (split on reading,
// joined on writing: HfWeightNames::phi3), rotary scaling default or
// longrope (short_factor up to original_max_position_embeddings, the
// top-level key winning as in Phi3Config, long_factor beyond), a partial
// rotary factor (Phi-4-mini rotates 3/4 of each head), tied embeddings
// (Phi-4-mini) and Mistral's sliding window (null: none).
#include "host/checkpoint/bridges/bridge_support.h"
#include "host/model/model_limits.h"

namespace accel::checkpoint::bridge {

const HfBridge& phi3_bridge();

namespace {

HfModelConfig read(const JsonFields& config) {
  require_architectures(config, {"Phi3ForCausalLM", "Phi3Model"}, "Phi3ForCausalLM");
  ModelOverrides o = rotary_decoder_shape(
      config, {.family = "Phi-3", .tied = true, .partial_rotary = true, .phi3_rope = true, .default_eps = 1e-5});
  o.sliding_window = config.optional_integer("sliding_window", 1, model::kMaxModelDimension).value_or(0);
  // The length longrope switches factors at (read there); the default
  // rotary embedding has no use for it.
  config.optional_integer("original_max_position_embeddings", 1, model::kMaxModelDimension);
  HfModelConfig out;
  for (const char* key : {"attention_dropout", "resid_pdrop", "embd_pdrop"}) note_dropout(config, key, out.ignored);
  out.shape = build_shape(config.where(), "llama-tiny", o);
  // Its own names for the weights and its own generation: export-hf writes
  // a Phi-3 back as one, even where a Llama computes the same.
  out.keys.model_type = "phi3";
  return out;
}

bool writes(const model::GptConfig& shape) {
  return dense_rotary_decoder_with(shape, {.tied = true, .sliding_window = true, .partial_rotary = true}) &&
         (shape.rope_scaling.kind == RopeScaling::Kind::none || shape.rope_scaling.kind == RopeScaling::Kind::longrope);
}

std::string config_json(const model::GptConfig& shape, const HfConfigKeys& /*keys*/) {
  nlohmann::json config = rotary_decoder_json(shape, phi3_bridge());
  // Phi3Config's own key (its default 4096 would otherwise win over the
  // rope object's): the length longrope switches factors at.
  const bool longrope = shape.rope_scaling.kind == RopeScaling::Kind::longrope;
  config["original_max_position_embeddings"] = longrope ? shape.rope_scaling.original_max_position : shape.seq_len;
  config["sliding_window"] = shape.sliding_window > 0 ? nlohmann::json(shape.sliding_window) : nlohmann::json();
  config["resid_pdrop"] = 0.0;
  config["embd_pdrop"] = 0.0;
  return config.dump(2) + "\n";
}

}  // namespace

const HfBridge& phi3_bridge() {
  static const HfBridge bridge{"phi3", "Phi3ForCausalLM", "Phi-3", HfWeightNames::phi3, read, writes, config_json};
  return bridge;
}

}  // namespace accel::checkpoint::bridge
