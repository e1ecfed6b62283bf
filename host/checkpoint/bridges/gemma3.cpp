// Gemma 3, text only (Gemma3ForCausalLM, model_type gemma3_text): Gemma's
// block (gemma_common.h) with q and k RMSNormed per head (1 + w), five
// sliding layers to one full by default (sliding_window_pattern), and two
// rotary bases: rope_local_base_freq (10000) for sliding layers, rope_theta
// (1e6) and its scaling (default, linear or llama3) for full ones, as
// transformers 5's rope_parameters keyed by layer type or the older keys
// say; other rope types are refused by name. transformers' Gemma 3 never
// applies attn_logit_softcapping (its attention is not given the cap), so a
// value there is noted and left alone, as transformers leaves it.
#include "host/checkpoint/bridges/gemma_common.h"
#include "host/model/model_limits.h"
#include "host/util/strformat.h"

namespace accel::checkpoint::bridge {

const HfBridge& gemma3_bridge();

namespace {

using nlohmann::json;

// One rope object of the full layers: linear (every inverse frequency
// divided by factor) read here, the others by the shared reader.
RopeScaling read_full_rope(const JsonFields& rope, std::optional<double>& theta) {
  const char* type_key = rope.has_value("rope_type") || !rope.has_value("type") ? "rope_type" : "type";
  if (!rope.has_value(type_key) || rope.string(type_key) != "linear") return read_rope_object(rope, theta);
  for (const auto& item : rope.json().items()) {
    if (item.key() != type_key && item.key() != "rope_theta" && item.key() != "factor") {
      rope.fail(item.key(), "is not supported (accel-host's linear rotary scaling takes factor and rope_theta)");
    }
  }
  if (rope.has_value("rope_theta")) theta = rope.positive_finite("rope_theta");
  RopeScaling scaling;
  scaling.kind = RopeScaling::Kind::linear;
  scaling.factor = rope.positive_finite("factor");
  return scaling;
}

// The two rotary bases and the full layers' scaling into `o`.
void read_rotary(const JsonFields& config, ModelOverrides& o) {
  std::optional<double> full_theta, local_theta;
  const RopeScaling scaling = read_rope_by_layer_type(config, "Gemma3", read_full_rope, full_theta, local_theta);
  if (!full_theta && config.has_value("rope_theta")) full_theta = config.positive_finite("rope_theta");
  if (!local_theta && config.has_value("rope_local_base_freq")) {
    local_theta = config.positive_finite("rope_local_base_freq");
  }
  o.rope_theta = full_theta.value_or(1e6);
  o.rope_scaling = scaling;
  o.block->rope_local_theta = local_theta.value_or(10000.0);
}

HfModelConfig read(const JsonFields& config) {
  require_architectures(config, {"Gemma3ForCausalLM", "Gemma3TextModel"}, "Gemma3ForCausalLM");
  ModelOverrides o = read_gemma_shape(config, {"Gemma3", /*sliding_pattern=*/6, /*final_logit_softcap=*/0.0,
                                               /*own_rope=*/true, /*reads_pattern=*/true});
  o.qk_norm = true;
  read_rotary(config, o);
  // transformers' copy of the pattern, written by to_dict and never read
  // back (only "sliding_window_pattern" and layer_types decide): type-checked.
  config.optional_integer("_sliding_window_pattern", 1, model::kMaxModelDimension);
  HfModelConfig out;
  if (const auto cap = config.optional_number("attn_logit_softcapping", 0.0)) {
    out.ignored.push_back(strformat("attn_logit_softcapping %g (Gemma3ForCausalLM does not apply it either)", *cap));
  }
  note_dropout(config, "attention_dropout", out.ignored);
  out.shape = build_shape(config.where(), "llama-tiny", o);
  return out;
}

bool writes(const model::GptConfig& shape) {
  return gemma_block(shape) && shape.qk_norm && shape.block.rope_local_theta > 0 &&
         shape.block.attn_logit_softcap == 0;
}

std::string config_json(const model::GptConfig& shape, const HfConfigKeys& /*keys*/) {
  json config = gemma_json(shape, gemma3_bridge());
  config["rope_parameters"] = {
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", shape.block.rope_local_theta}}},
      {"full_attention", rope_parameters_json(shape)}};
  config["attn_logit_softcapping"] = nullptr;
  return config.dump(2) + "\n";
}

}  // namespace

const HfBridge& gemma3_bridge() {
  static const HfBridge bridge{"gemma3_text", "Gemma3ForCausalLM", "Gemma3", HfWeightNames::llama, read, writes,
                               config_json};
  return bridge;
}

}  // namespace accel::checkpoint::bridge
