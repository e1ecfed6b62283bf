// Qwen2-MoE (Qwen2MoeForCausalLM): Qwen2's attention; every block's MLP a
// mixture of experts with a shared expert behind a sigmoid gate, top-k
// weights kept as the softmax gave them unless norm_topk_prob.
#include "host/checkpoint/bridges/bridge_support.h"
#include "host/util/strformat.h"

namespace accel::checkpoint::bridge {

const HfBridge& qwen2_moe_bridge();

namespace {

HfModelConfig read(const JsonFields& config) {
  require_architectures(config, {"Qwen2MoeForCausalLM", "Qwen2MoeModel"}, "Qwen2MoeForCausalLM");
  ModelOverrides o = rotary_decoder_shape(config, {"Qwen2-MoE"});
  // intermediate_size: the dense MLP of mlp_only_layers, none here; kept for export-hf.
  const int64_t dense_width = *o.ffn_size;
  o.ffn_size = dimension(config, "moe_intermediate_size");
  o.n_experts = dimension(config, "num_experts");
  o.experts_per_token = config.integer("num_experts_per_tok", 1, *o.n_experts);
  o.shared_expert_size = dimension(config, "shared_expert_intermediate_size");
  // transformers' defaults: un-normalised top-k weights, q/k/v biases.
  o.normalize_top_k = config.has_value("norm_topk_prob") && config.boolean("norm_topk_prob");
  o.qkv_bias = !config.has_value("qkv_bias") || config.boolean("qkv_bias");
  if (const auto step = config.optional_integer("decoder_sparse_step", 0); step && *step != 1) {
    config.fail("decoder_sparse_step", strformat("is %lld; accel-host's Qwen2-MoE has experts in every layer (1)",
                                                 static_cast<long long>(*step)));
  }
  if (config.has_value("mlp_only_layers")) {
    const nlohmann::json& dense = config.value("mlp_only_layers");
    if (!dense.is_array() || !dense.empty()) {
      config.fail("mlp_only_layers",
                  "is " + sdk::describe(dense) + "; accel-host's Qwen2-MoE has experts in every layer ([])");
    }
  }
  require_full_attention(config);
  HfModelConfig out;
  note_dropout(config, "attention_dropout", out.ignored);
  read_router_aux_loss_coef(config, out);
  out.keys.intermediate_size = dense_width;
  out.shape = build_shape(config.where(), "moe-tiny", o);
  return out;
}

bool writes(const model::GptConfig& shape) {
  return shape.family == model::ModelFamily::llama && shape.has_experts() && shape.shared_expert_size > 0 &&
         shape.head_dim == 0 && !shape.tie_embeddings && !shape.qk_norm && shape.sliding_window == 0;
}

std::string config_json(const model::GptConfig& shape, const HfConfigKeys& keys) {
  nlohmann::json config = rotary_decoder_json(shape, qwen2_moe_bridge());
  // mlp_only_layers' width (none run): the source's, else the experts'.
  config["intermediate_size"] = keys.intermediate_size.value_or(shape.ffn_size);
  config["moe_intermediate_size"] = shape.ffn_size;
  config["shared_expert_intermediate_size"] = shape.shared_expert_size;
  config["num_experts"] = shape.n_experts;
  config["num_experts_per_tok"] = shape.experts_per_token;
  config["norm_topk_prob"] = shape.normalize_top_k;
  config["qkv_bias"] = shape.qkv_bias;
  config["decoder_sparse_step"] = 1;
  config["mlp_only_layers"] = nlohmann::json::array();
  config["use_sliding_window"] = false;
  add_router_training_keys(config, keys);
  return config.dump(2) + "\n";
}

}  // namespace

const HfBridge& qwen2_moe_bridge() {
  static const HfBridge bridge{"qwen2_moe", "Qwen2MoeForCausalLM", "Qwen2-MoE", HfWeightNames::qwen2_moe, read, writes,
                               config_json};
  return bridge;
}

}  // namespace accel::checkpoint::bridge
