// Ministral 3 (Ministral3ForCausalLM): Mistral's block (a head_dim of its
// own, an optional sliding window) rotated by yarn, with each query scaled
// after the rotation by 1 + beta * log(1 + floor(position / original
// length)), transformers' llama_4_scaling_beta inside rope_parameters. A file
// without rope_parameters takes Ministral3Config's own (yarn, factor 16 over
// 16384 positions, beta 0.1).
#include "host/checkpoint/bridges/bridge_support.h"
#include "host/checkpoint/rope_json.h"
#include "host/model/model_limits.h"

namespace accel::checkpoint::bridge {

const HfBridge& ministral3_bridge();

namespace {

using nlohmann::json;

// Ministral3Config.__post_init__'s rope_parameters when the file has none.
json default_rope() {
  return {{"type", "yarn"},        {"rope_theta", 1000000.0}, {"factor", 16.0},
          {"original_max_position_embeddings", 16384},       {"beta_fast", 32.0},
          {"beta_slow", 1.0},      {"mscale_all_dim", 1.0},   {"mscale", 1.0},
          {"llama_4_scaling_beta", 0.1}};
}

void read_rotary(const JsonFields& config, int64_t max_position, ModelOverrides& o) {
  if (config.has_value("rope_scaling")) {
    config.fail("rope_scaling", "is not read by Ministral3Config; its rotation is rope_parameters");
  }
  const json fallback = default_rope();
  const JsonFields rope = config.has_value("rope_parameters") ? config.object("rope_parameters")
                                                              : JsonFields(fallback, config.where(), "rope_parameters.");
  const char* type_key = rope.has_value("rope_type") || !rope.has_value("type") ? "rope_type" : "type";
  const std::string type = rope.has_value(type_key) ? rope.string(type_key) : "default";
  o.rope_scaling = read_rope_scaling(rope, type, max_position, std::nullopt,
                                     {"rope_type", "type", "rope_theta", "llama_4_scaling_beta",
                                      "max_position_embeddings"});
  // transformers' rope validation skips these two; the top-level length decides.
  rope.optional_integer("max_position_embeddings", 1, model::kMaxModelDimension);
  o.rope_theta = rope.has_value("rope_theta") ? rope.positive_finite("rope_theta") : 1000000.0;
  const double beta = rope.optional_number("llama_4_scaling_beta", 0.0, 1e6).value_or(0.0);
  if (beta > 0.0 && o.rope_scaling->original_max_position < 1) {
    rope.fail("llama_4_scaling_beta", "needs original_max_position_embeddings (the length the queries scale by)");
  }
  o.query_position_scale_beta = beta;
}

HfModelConfig read(const JsonFields& config) {
  require_architectures(config, {"Ministral3ForCausalLM", "Ministral3Model"}, "Ministral3ForCausalLM");
  ModelOverrides o = rotary_decoder_shape(
      config, {.family = "Ministral3", .head_dim = true, .tied = true, .own_rope = true, .default_eps = 1e-5});
  o.sliding_window = config.optional_integer("sliding_window", 1, model::kMaxModelDimension).value_or(0);
  read_rotary(config, *o.seq_len, o);
  HfModelConfig out;
  note_dropout(config, "attention_dropout", out.ignored);
  out.shape = build_shape(config.where(), "llama-tiny", o);
  return out;
}

bool writes(const model::GptConfig& shape) {
  return shape.query_position_scale_beta > 0.0 &&
         dense_rotary_decoder_with(shape, {.head_dim = true, .tied = true, .sliding_window = true,
                                           .query_position_scale = true});
}

std::string config_json(const model::GptConfig& shape, const HfConfigKeys& /*keys*/) {
  json config = rotary_decoder_json(shape, ministral3_bridge());
  config["head_dim"] = shape.attention_head_dim();
  config["sliding_window"] = shape.sliding_window > 0 ? json(shape.sliding_window) : json();
  config["rope_parameters"]["llama_4_scaling_beta"] = shape.query_position_scale_beta;
  return config.dump(2) + "\n";
}

}  // namespace

const HfBridge& ministral3_bridge() {
  static const HfBridge bridge{"ministral3", "Ministral3ForCausalLM", "Ministral3", HfWeightNames::llama, read, writes,
                               config_json};
  return bridge;
}

}  // namespace accel::checkpoint::bridge
