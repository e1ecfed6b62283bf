// SmolLM3 (SmolLM3ForCausalLM): Llama's block where the layers whose
// no_rope_layers entry is 0 attend without rotary positions (NoPE; by
// default every no_rope_layer_interval-th layer), rope_theta 2e6 and tied
// embeddings by default. Its sliding window (use_sliding_window, on the
// NoPE layers only) is not built here and is refused by name.
#include "host/checkpoint/bridges/bridge_support.h"
#include "host/model/model_limits.h"
#include "host/util/strformat.h"

namespace accel::checkpoint::bridge {

const HfBridge& smollm3_bridge();

namespace {

HfModelConfig read(const JsonFields& config) {
  require_architectures(config, {"SmolLM3ForCausalLM", "SmolLM3Model"}, "SmolLM3ForCausalLM");
  ModelOverrides o = rotary_decoder_shape(
      config, {.family = "SmolLM3", .head_dim = true, .tied = true, .default_theta = 2000000.0, .tied_by_default = true});
  require_boolean(config, "use_sliding_window", false, "accel-host's SmolLM3 attends to the whole sequence");
  require_full_attention(config);
  // SmolLM3Config: no_rope_layers given (1: rotary, 0: none) or every
  // no_rope_layer_interval-th layer without.
  const int64_t layers = *o.n_layer;
  std::vector<int64_t> rotary;
  // SmolLM3Config keeps the interval beside the list it derived: the list
  // decides, the interval is checked either way.
  const int64_t interval =
      config.optional_integer("no_rope_layer_interval", 1, model::kMaxModelDimension).value_or(4);
  if (config.has_value("no_rope_layers")) {
    rotary = config.integer_array("no_rope_layers", 0, 1);
    if (static_cast<int64_t>(rotary.size()) != layers) {
      config.fail("no_rope_layers", strformat("holds %zu entries for %lld layers", rotary.size(),
                                              static_cast<long long>(layers)));
    }
  } else {
    for (int64_t layer = 0; layer < layers; ++layer) rotary.push_back((layer + 1) % interval != 0 ? 1 : 0);
  }
  std::vector<int64_t> nope;
  for (int64_t layer = 0; layer < layers; ++layer) {
    if (rotary[static_cast<size_t>(layer)] == 0) nope.push_back(layer);
  }
  o.nope_layers = nope;
  HfModelConfig out;
  note_dropout(config, "attention_dropout", out.ignored);
  out.shape = build_shape(config.where(), "llama-tiny", o);
  return out;
}

bool writes(const model::GptConfig& shape) {
  return !shape.nope_layers.empty() &&
         dense_rotary_decoder_with(shape, {.head_dim = true, .tied = true, .nope_layers = true});
}

std::string config_json(const model::GptConfig& shape, const HfConfigKeys& /*keys*/) {
  nlohmann::json config = rotary_decoder_json(shape, smollm3_bridge());
  std::vector<int64_t> rotary;
  for (int64_t layer = 0; layer < shape.n_layer; ++layer) rotary.push_back(shape.rotates_layer(layer) ? 1 : 0);
  config["no_rope_layers"] = rotary;
  config["head_dim"] = shape.attention_head_dim();
  config["attention_bias"] = false;
  config["mlp_bias"] = false;
  config["use_sliding_window"] = false;
  config["sliding_window"] = nullptr;
  config["layer_types"] = std::vector<std::string>(static_cast<size_t>(shape.n_layer), "full_attention");
  return config.dump(2) + "\n";
}

}  // namespace

const HfBridge& smollm3_bridge() {
  static const HfBridge bridge{"smollm3", "SmolLM3ForCausalLM", "SmolLM3", HfWeightNames::llama, read, writes,
                               config_json};
  return bridge;
}

}  // namespace accel::checkpoint::bridge
