// Mixtral (MixtralForCausalLM): Llama's attention with a mixture of experts
// in every block (renormalised top-k routing, no shared expert). On disk
// each expert's projections are separate tensors (hf_moe.cpp).
#include "host/checkpoint/bridges/bridge_support.h"
#include "host/util/strformat.h"

namespace accel::checkpoint::bridge {

const HfBridge& mixtral_bridge();

namespace {

HfModelConfig read(const JsonFields& config) {
  require_architectures(config, {"MixtralForCausalLM", "MixtralModel"}, "MixtralForCausalLM");
  ModelOverrides o = rotary_decoder_shape(config, {"Mixtral"});
  o.n_experts = dimension(config, "num_local_experts");
  o.experts_per_token = config.integer("num_experts_per_tok", 1, *o.n_experts);
  if (config.has_value("sliding_window")) {
    config.fail("sliding_window", "is " + sdk::describe(config.value("sliding_window")) +
                                      "; accel-host's Mixtral attends to the whole sequence (null)");
  }
  if (const auto jitter = config.optional_number("router_jitter_noise", 0.0, 1e9); jitter && *jitter != 0.0) {
    config.fail("router_jitter_noise", strformat("is %g; accel-host's router adds no noise (0)", *jitter));
  }
  HfModelConfig out;
  note_dropout(config, "attention_dropout", out.ignored);
  read_router_aux_loss_coef(config, out);
  out.shape = build_shape(config.where(), "moe-tiny", o);
  return out;
}

bool writes(const model::GptConfig& shape) {
  return shape.family == model::ModelFamily::llama && shape.has_experts() && shape.shared_expert_size == 0 &&
         !shape.qkv_bias && shape.normalize_top_k && shape.head_dim == 0 && !shape.tie_embeddings &&
         !shape.qk_norm && shape.sliding_window == 0;
}

std::string config_json(const model::GptConfig& shape, const HfConfigKeys& keys) {
  nlohmann::json config = rotary_decoder_json(shape, mixtral_bridge());
  config["head_dim"] = shape.attention_head_dim();
  config["num_local_experts"] = shape.n_experts;
  config["num_experts_per_tok"] = shape.experts_per_token;
  config["sliding_window"] = nullptr;
  config["router_jitter_noise"] = 0.0;
  add_router_training_keys(config, keys);
  return config.dump(2) + "\n";
}

}  // namespace

const HfBridge& mixtral_bridge() {
  static const HfBridge bridge{"mixtral", "MixtralForCausalLM", "Mixtral", HfWeightNames::mixtral, read, writes,
                               config_json};
  return bridge;
}

}  // namespace accel::checkpoint::bridge
