// Gemma 2 (Gemma2ForCausalLM): Gemma's block (gemma_common.h) with the
// attention logits soft-capped (attn_logit_softcapping, default 50) and
// the output logits too (final_logit_softcapping, default 30), every other
// layer sliding, one rotary base for all layers.
#include "host/checkpoint/bridges/gemma_common.h"

namespace accel::checkpoint::bridge {

const HfBridge& gemma2_bridge();

namespace {

HfModelConfig read(const JsonFields& config) {
  require_architectures(config, {"Gemma2ForCausalLM", "Gemma2Model"}, "Gemma2ForCausalLM");
  ModelOverrides o = read_gemma_shape(config, {"Gemma2", /*sliding_pattern=*/2, /*final_logit_softcap=*/30.0,
                                               /*own_rope=*/false, /*reads_pattern=*/false});
  o.block->attn_logit_softcap = !config.contains("attn_logit_softcapping") ? 50.0
                                : config.has_value("attn_logit_softcapping")
                                    ? config.positive_finite("attn_logit_softcapping")
                                    : 0.0;
  HfModelConfig out;
  note_dropout(config, "attention_dropout", out.ignored);
  out.shape = build_shape(config.where(), "llama-tiny", o);
  return out;
}

bool writes(const model::GptConfig& shape) {
  return gemma_block(shape) && !shape.qk_norm && shape.block.rope_local_theta == 0;
}

std::string config_json(const model::GptConfig& shape, const HfConfigKeys& /*keys*/) {
  nlohmann::json config = gemma_json(shape, gemma2_bridge());
  config["attn_logit_softcapping"] = optional_cap(shape.block.attn_logit_softcap);
  return config.dump(2) + "\n";
}

}  // namespace

const HfBridge& gemma2_bridge() {
  static const HfBridge bridge{"gemma2", "Gemma2ForCausalLM", "Gemma2", HfWeightNames::llama, read, writes,
                               config_json};
  return bridge;
}

}  // namespace accel::checkpoint::bridge
