// The bridges' shared readers and writers (see bridge_support.h).
#include "host/checkpoint/bridges/bridge_support.h"

#include <optional>
#include <stdexcept>

#include "host/model/model_limits.h"
#include "host/util/strformat.h"

namespace accel::checkpoint::bridge {
namespace {

using nlohmann::json;
using sdk::describe;

// The rotary scaling types the model computes (model/llama.cpp).
constexpr const char* kRopeTypes = "accel-host builds the default and llama3 rotary embeddings";

}  // namespace

RopeScaling read_rope_object(const JsonFields& rope, std::optional<double>& theta) {
  const char* type_key = rope.has_value("rope_type") || !rope.has_value("type") ? "rope_type" : "type";
  require_string(rope, type_key, {"default", "llama3"}, kRopeTypes);
  const bool llama3 = rope.has_value(type_key) && rope.string(type_key) == "llama3";
  for (const auto& item : rope.json().items()) {
    const std::string& key = item.key();
    const bool known = key == "rope_type" || key == "type" || key == "rope_theta" ||
                       (llama3 && (key == "factor" || key == "low_freq_factor" || key == "high_freq_factor" ||
                                   key == "original_max_position_embeddings"));
    if (!known) rope.fail(key, std::string("is not supported (") + kRopeTypes + ")");
  }
  if (rope.has_value("rope_theta")) theta = rope.positive_finite("rope_theta");
  RopeScaling scaling;
  if (!llama3) return scaling;
  scaling.kind = RopeScaling::Kind::llama3;
  scaling.factor = rope.positive_finite("factor");
  scaling.low_freq_factor = rope.positive_finite("low_freq_factor");
  scaling.high_freq_factor = rope.positive_finite("high_freq_factor");
  if (scaling.high_freq_factor <= scaling.low_freq_factor) {
    rope.fail("high_freq_factor", strformat("(%g) must exceed \"low_freq_factor\" (%g)", scaling.high_freq_factor,
                                            scaling.low_freq_factor));
  }
  scaling.original_max_position = rope.integer("original_max_position_embeddings", 1, model::kMaxModelDimension);
  return scaling;
}

int64_t dimension(const JsonFields& config, const char* key, int64_t min) {
  return config.integer(key, min, model::kMaxModelDimension);
}

void require_architectures(const JsonFields& config, std::initializer_list<const char*> supported, const char* named) {
  if (!config.has_value("architectures")) return;
  for (const json& entry : config.array("architectures")) {
    bool known = false;
    for (const char* name : supported) known = known || (entry.is_string() && entry.get_ref<const std::string&>() == name);
    if (!known) {
      config.fail("architectures", "holds " + describe(entry) + ", which is not supported (supported: " + named + ")");
    }
  }
}

void require_boolean(const JsonFields& config, const char* key, bool expected, const std::string& why) {
  if (config.has_value(key) && config.boolean(key) != expected) {
    config.fail(key, std::string("is ") + (expected ? "false" : "true") + "; " + why);
  }
}

void require_string(const JsonFields& config, const char* key, std::initializer_list<const char*> accepted,
                    const std::string& why) {
  if (!config.has_value(key)) return;
  const std::string value = config.string(key);
  for (const char* name : accepted) {
    if (value == name) return;
  }
  config.fail(key, "is " + describe(config.value(key)) + "; " + why);
}

void note_dropout(const JsonFields& config, const char* key, std::vector<std::string>& ignored) {
  const std::optional<double> rate = config.optional_number(key, 0.0, 1.0);
  if (rate && *rate != 0.0) ignored.push_back(strformat("%s %g (accel-host trains without dropout)", key, *rate));
}

void require_heads_divide(const JsonFields& config, const char* width_key, int64_t width, const char* heads_key,
                          int64_t heads) {
  if (width % heads != 0) {
    config.fail(width_key, strformat("(%lld) must be a multiple of \"%s\" (%lld)", static_cast<long long>(width),
                                     heads_key, static_cast<long long>(heads)));
  }
}

void require_full_attention(const JsonFields& config) {
  require_boolean(config, "use_sliding_window", false, "accel-host attends to the whole sequence");
  // The window and the first layer it applies from (Qwen2's and Qwen3's)
  // act only under use_sliding_window, refused above: read, then unused.
  config.optional_integer("sliding_window", 0);
  config.optional_integer("max_window_layers", 0);
  if (!config.has_value("layer_types")) return;
  const json& types = config.value("layer_types");
  if (!types.is_array()) config.fail("layer_types", "must be a list, got " + describe(types));
  for (const json& type : types) {
    if (type != "full_attention") {
      config.fail("layer_types", "holds " + describe(type) + "; accel-host's layers are all full_attention");
    }
  }
}

void read_router_aux_loss_coef(const JsonFields& config, HfModelConfig& out) {
  // A training setting, not the model's: the run's own --moe-aux-loss-coef
  // decides, but the value is kept for export-hf to write back.
  const bool aux = config.has_value("output_router_logits") && config.boolean("output_router_logits");
  const auto coef = config.optional_number("router_aux_loss_coef", 0.0, 1e9);
  if (aux && coef && *coef != 0.0) {
    out.ignored.push_back(strformat("router_aux_loss_coef %g (the run's --moe-aux-loss-coef applies)", *coef));
  }
  out.keys.router_aux_loss_coef = coef;
}

model::GptConfig build_shape(const std::string& where, const char* preset, const ModelOverrides& overrides) {
  try {
    return model::make_gpt_config(preset, overrides);
  } catch (const std::invalid_argument& e) {
    throw CheckpointError(where + ": " + e.what());
  }
}

ModelOverrides rotary_decoder_shape(const JsonFields& config, const RotaryDecoderKeys& keys) {
  const std::string family = keys.family;
  ModelOverrides o;
  o.vocab_size = dimension(config, "vocab_size", 2);
  o.seq_len = dimension(config, "max_position_embeddings");
  o.n_embd = dimension(config, "hidden_size");
  o.n_layer = dimension(config, "num_hidden_layers");
  o.n_head = dimension(config, "num_attention_heads");
  require_heads_divide(config, "hidden_size", *o.n_embd, "num_attention_heads", *o.n_head);
  const int64_t head_width = *o.n_embd / *o.n_head;
  const std::optional<int64_t> head_dim = config.optional_integer("head_dim", 1, model::kMaxModelDimension);
  if (head_dim && *head_dim != head_width && !keys.head_dim) {
    config.fail("head_dim", strformat("is %lld; accel-host's %s uses hidden_size / num_attention_heads = %lld",
                                      static_cast<long long>(*head_dim), family.c_str(),
                                      static_cast<long long>(head_width)));
  }
  const int64_t width = head_dim.value_or(head_width);
  if (width % 2 != 0) {
    config.fail(head_dim ? "head_dim" : "hidden_size",
                strformat("%s= %lld is odd; rotary positions need an even head width",
                          head_dim ? "" : "/ \"num_attention_heads\" ", static_cast<long long>(width)));
  }
  // The default width stays 0 in the shape: presets and files compare equal.
  o.head_dim = width == head_width ? 0 : width;
  o.n_kv_head = config.optional_integer("num_key_value_heads", 1, *o.n_head).value_or(*o.n_head);
  require_heads_divide(config, "num_attention_heads", *o.n_head, "num_key_value_heads", *o.n_kv_head);
  o.ffn_size = dimension(config, "intermediate_size");
  // Rotary: transformers 5's rope_parameters, or 4's rope_theta and rope_scaling.
  if (!keys.own_rope) read_rotary_keys(config, o);
  o.norm_eps = config.has_value("rms_norm_eps") ? config.positive_finite("rms_norm_eps") : 1e-6;
  if (!keys.own_activation) require_string(config, "hidden_act", {"silu"}, "accel-host's " + family + " uses silu");
  require_boolean(config, "attention_bias", false, "accel-host's " + family + " has no attention biases");
  require_boolean(config, "mlp_bias", false, "accel-host's " + family + " has no MLP biases");
  if (keys.tied) {
    o.tie_embeddings = config.has_value("tie_word_embeddings") && config.boolean("tie_word_embeddings");
  } else {
    require_boolean(config, "tie_word_embeddings", false, "accel-host's " + family + " keeps an untied lm_head");
  }
  if (const auto tp = config.optional_integer("pretraining_tp"); tp && *tp != 1) {
    config.fail("pretraining_tp", strformat("is %lld; accel-host's %s computes the projections whole "
                                            "(pretraining_tp 1)", static_cast<long long>(*tp), family.c_str()));
  }
  return o;
}

void read_rotary_keys(const JsonFields& config, ModelOverrides& o) {
  std::optional<double> theta;
  if (config.has_value("rope_theta")) theta = config.positive_finite("rope_theta");
  RopeScaling scaling;
  if (config.has_value("rope_parameters")) {
    if (config.has_value("rope_scaling")) {
      config.fail("rope_scaling", "is " + describe(config.value("rope_scaling")) +
                                      " beside \"rope_parameters\"; give one of them");
    }
    scaling = read_rope_object(config.object("rope_parameters"), theta);
  } else if (config.has_value("rope_scaling")) {
    scaling = read_rope_object(config.object("rope_scaling"), theta);
  }
  o.rope_theta = theta.value_or(10000.0);
  o.rope_scaling = scaling;
}

json rope_parameters_json(const model::GptConfig& shape) {
  const RopeScaling& r = shape.rope_scaling;
  if (r.kind == RopeScaling::Kind::linear) {
    return {{"rope_theta", shape.rope_theta}, {"rope_type", "linear"}, {"factor", r.factor}};
  }
  if (r.kind != RopeScaling::Kind::llama3) return {{"rope_theta", shape.rope_theta}, {"rope_type", "default"}};
  return {{"rope_theta", shape.rope_theta},
          {"rope_type", "llama3"},
          {"factor", r.factor},
          {"low_freq_factor", r.low_freq_factor},
          {"high_freq_factor", r.high_freq_factor},
          {"original_max_position_embeddings", r.original_max_position}};
}

json rotary_decoder_json(const model::GptConfig& shape, const HfBridge& bridge) {
  return {
      {"architectures", {bridge.architecture}},
      {"model_type", bridge.model_type},
      {"vocab_size", shape.vocab_size},
      {"max_position_embeddings", shape.seq_len},
      {"hidden_size", shape.n_embd},
      {"intermediate_size", shape.ffn_size},
      {"num_hidden_layers", shape.n_layer},
      {"num_attention_heads", shape.n_head},
      {"num_key_value_heads", shape.n_kv_head},
      {"hidden_act", "silu"},
      {"rms_norm_eps", shape.norm_eps},
      {"rope_parameters", rope_parameters_json(shape)},
      {"attention_dropout", 0.0},
      {"tie_word_embeddings", shape.tie_embeddings},
      {"initializer_range", 0.02},
      {"use_cache", true},
      {"bos_token_id", nullptr},
      {"eos_token_id", nullptr},
      {"pad_token_id", nullptr},
      {"dtype", "float32"},
  };
}

void add_full_attention_keys(json& config) {
  config["use_sliding_window"] = false;
  config["sliding_window"] = nullptr;
}

void add_router_training_keys(json& config, const HfConfigKeys& keys) {
  config["output_router_logits"] = false;
  config["router_aux_loss_coef"] = keys.router_aux_loss_coef.value_or(0.0);
}

bool dense_rotary_decoder_with(const model::GptConfig& shape, const DenseChoices& allowed) {
  if (shape.family != model::ModelFamily::llama || shape.has_experts()) return false;
  return (allowed.qkv_bias || !shape.qkv_bias) && (allowed.head_dim || shape.head_dim == 0) &&
         (allowed.tied || !shape.tie_embeddings) && (allowed.qk_norm || !shape.qk_norm) &&
         (allowed.sliding_window || shape.sliding_window == 0) && (allowed.block || shape.block.is_default());
}

}  // namespace accel::checkpoint::bridge
