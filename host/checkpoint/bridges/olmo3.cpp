// OLMo 3 (Olmo3ForCausalLM): OLMo 2's block (norms after each sub-layer,
// q and k RMSNormed over the whole projection) with a sliding window on
// three layers of four (transformers' layer_types), each layer kind rotated
// by its own rope_parameters: the sliding layers by the default embedding,
// the full ones by any rope type (OLMo 3's long-context yarn), the older
// rope_scaling key merged into the full layers' as Olmo3Config merges it.
#include "host/checkpoint/bridges/bridge_support.h"
#include "host/checkpoint/rope_json.h"
#include "host/model/model_limits.h"

namespace accel::checkpoint::bridge {

const HfBridge& olmo3_bridge();

namespace {

using nlohmann::json;

constexpr double kDefaultTheta = 500000.0;  // Olmo3Config.default_theta

// The full layers' rotation from one rope object, any type.
RopeScaling read_full_rope(const JsonFields& rope, int64_t max_position, std::optional<double>& theta) {
  const char* type_key = rope.has_value("rope_type") || !rope.has_value("type") ? "rope_type" : "type";
  const std::string type = rope.has_value(type_key) ? rope.string(type_key) : "default";
  RopeScaling scaling = read_rope_scaling(rope, type, max_position, std::nullopt, {"rope_type", "type", "rope_theta"});
  if (rope.has_value("rope_theta")) theta = rope.positive_finite("rope_theta");
  return scaling;
}

void read_rotary(const JsonFields& config, int64_t max_position, ModelOverrides& o, BlockChoices& b) {
  std::optional<double> full_theta, local_theta;
  if (config.has_value("rope_theta")) full_theta = local_theta = config.positive_finite("rope_theta");
  const RopeScaling scaling = read_rope_by_layer_type(
      config, "Olmo3",
      [max_position](const JsonFields& rope, std::optional<double>& theta) {
        return read_full_rope(rope, max_position, theta);
      },
      full_theta, local_theta);
  o.rope_theta = full_theta.value_or(kDefaultTheta);
  o.rope_scaling = scaling;
  b.rope_local_theta = local_theta.value_or(kDefaultTheta);
}

HfModelConfig read(const JsonFields& config) {
  require_architectures(config, {"Olmo3ForCausalLM", "Olmo3Model"}, "Olmo3ForCausalLM");
  ModelOverrides o = rotary_decoder_shape(
      config, {.family = "Olmo3", .head_dim = true, .tied = true, .own_rope = true, .default_eps = 1e-5});
  BlockChoices b;
  b.norm_placement = BlockChoices::NormPlacement::post;
  b.qk_norm_whole = true;
  b.sliding_layers = read_sliding_layers(config, *o.n_layer, /*pattern=*/4, "Olmo3");
  // The window (null: none; Olmo3Config's default 4096 when absent).
  o.sliding_window = !config.contains("sliding_window")
                         ? 4096
                         : config.optional_integer("sliding_window", 1, model::kMaxModelDimension).value_or(0);
  bool any_sliding = false;
  for (const bool sliding : b.sliding_layers) any_sliding = any_sliding || sliding;
  if (any_sliding && *o.sliding_window == 0) {
    config.fail("sliding_window", "is null, but layer_types has sliding_attention layers");
  }
  read_rotary(config, *o.seq_len, o, b);
  o.block = b;
  HfModelConfig out;
  note_dropout(config, "attention_dropout", out.ignored);
  out.shape = build_shape(config.where(), "llama-tiny", o);
  return out;
}

bool writes(const model::GptConfig& shape) {
  const BlockChoices& b = shape.block;
  BlockChoices rest = b;  // every choice but OLMo 3's own must be Llama's
  rest.norm_placement = BlockChoices::NormPlacement::pre;
  rest.qk_norm_whole = false;
  rest.sliding_layers.clear();
  rest.rope_local_theta = 0.0;
  return rest.is_default() && b.norm_placement == BlockChoices::NormPlacement::post && b.qk_norm_whole &&
         !b.sliding_layers.empty() && b.rope_local_theta > 0 &&
         dense_rotary_decoder_with(shape, {.head_dim = true, .tied = true, .sliding_window = true, .block = true});
}

std::string config_json(const model::GptConfig& shape, const HfConfigKeys& /*keys*/) {
  json config = rotary_decoder_json(shape, olmo3_bridge());
  if (shape.head_dim > 0) config["head_dim"] = shape.head_dim;
  config["attention_bias"] = false;
  json types = json::array();
  for (const bool sliding : shape.block.sliding_layers) types.push_back(sliding ? "sliding_attention" : "full_attention");
  config["layer_types"] = types;
  config["sliding_window"] = shape.sliding_window > 0 ? json(shape.sliding_window) : json();
  config["rope_parameters"] = {
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", shape.block.rope_local_theta}}},
      {"full_attention", rope_parameters_json(shape)}};
  return config.dump(2) + "\n";
}

}  // namespace

const HfBridge& olmo3_bridge() {
  static const HfBridge bridge{"olmo3", "Olmo3ForCausalLM", "Olmo3", HfWeightNames::llama, read, writes, config_json};
  return bridge;
}

}  // namespace accel::checkpoint::bridge
