// The bridges' shared readers and writers (see bridge_support.h).
#include "host/checkpoint/bridges/bridge_support.h"

#include <optional>
#include <stdexcept>

#include "host/checkpoint/rope_json.h"
#include "host/model/model_limits.h"
#include "host/util/strformat.h"

namespace accel::checkpoint::bridge {
namespace {

using nlohmann::json;
using sdk::describe;

// One rope object ("rope_parameters", or the older "rope_scaling" whose type
// may sit under "type"): its type and parameters (checkpoint/rope_json.h),
// the base and, where the family rotates part of each head, the fraction.
// Every other key is refused by name.
RopeScaling read_rope_object(const JsonFields& rope, const JsonFields& config, const RotaryDecoderKeys& keys,
                             int64_t max_position, std::optional<double>& theta, std::optional<double>& partial) {
  const char* type_key = rope.has_value("rope_type") || !rope.has_value("type") ? "rope_type" : "type";
  const std::string type = rope.has_value(type_key) ? rope.string(type_key) : "default";
  if (keys.phi3_rope) {
    require_string(rope, type_key, {"default", "longrope"},
                   std::string("accel-host's ") + keys.family + " builds the default and longrope rotary embeddings");
  }
  // Phi-3 keeps the pretraining length beside the object; it wins there.
  std::optional<int64_t> original;
  if (keys.phi3_rope && type == "longrope") {
    // Phi3Config's default when the file has none.
    original = config.optional_integer("original_max_position_embeddings", 1, model::kMaxModelDimension).value_or(4096);
  }
  RopeScaling scaling =
      keys.partial_rotary
          ? read_rope_scaling(rope, type, max_position, original, {"rope_type", "type", "rope_theta", "partial_rotary_factor"})
          : read_rope_scaling(rope, type, max_position, original, {"rope_type", "type", "rope_theta"});
  if (rope.has_value("rope_theta")) theta = rope.positive_finite("rope_theta");
  if (rope.has_value("partial_rotary_factor")) partial = rope.optional_number("partial_rotary_factor", 0.0, 1.0);
  return scaling;
}

}  // namespace

RopeScaling read_rope_object(const JsonFields& rope, std::optional<double>& theta) {
  const char* type_key = rope.has_value("rope_type") || !rope.has_value("type") ? "rope_type" : "type";
  require_string(rope, type_key, {"default", "llama3", "linear"},
                 "accel-host builds the default, llama3 and linear rotary embeddings here");
  const std::string type = rope.has_value(type_key) ? rope.string(type_key) : "default";
  // None of the three reads a sequence length.
  RopeScaling scaling = read_rope_scaling(rope, type, /*max_position=*/1, std::nullopt, {"rope_type", "type", "rope_theta"});
  if (rope.has_value("rope_theta")) theta = rope.positive_finite("rope_theta");
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

RopeScaling read_rope_by_layer_type(const JsonFields& config, const std::string& family,
                                    const FullRopeReader& read_full, std::optional<double>& full_theta,
                                    std::optional<double>& local_theta) {
  if (!config.has_value("rope_parameters")) {
    return config.has_value("rope_scaling") ? read_full(config.object("rope_scaling"), full_theta) : RopeScaling{};
  }
  if (config.has_value("rope_scaling")) {
    config.fail("rope_scaling",
                "is " + describe(config.value("rope_scaling")) + " beside \"rope_parameters\"; give one of them");
  }
  const JsonFields by_type = config.object("rope_parameters");
  by_type.only({"sliding_attention", "full_attention"});
  RopeScaling scaling;
  if (by_type.has_value("full_attention")) scaling = read_full(by_type.object("full_attention"), full_theta);
  if (by_type.has_value("sliding_attention")) {
    const JsonFields sliding = by_type.object("sliding_attention");
    if (read_rope_object(sliding, local_theta).kind != RopeScaling::Kind::none) {
      sliding.fail("rope_type", "scales the sliding layers' rotation; accel-host's " + family +
                                    " scales full layers only");
    }
  }
  return scaling;
}

std::vector<bool> read_sliding_layers(const JsonFields& config, int64_t layers, int64_t pattern,
                                      const std::string& family) {
  std::vector<bool> sliding;
  if (!config.has_value("layer_types")) {
    for (int64_t i = 0; i < layers; ++i) sliding.push_back((i + 1) % pattern != 0);
    return sliding;
  }
  const json& types = config.array("layer_types");
  if (static_cast<int64_t>(types.size()) != layers) {
    config.fail("layer_types", strformat("names %zu layers; num_hidden_layers is %lld", types.size(),
                                         static_cast<long long>(layers)));
  }
  for (const json& type : types) {
    if (type != "sliding_attention" && type != "full_attention") {
      config.fail("layer_types", "holds " + describe(type) + "; accel-host's " + family +
                                     " layers are sliding_attention or full_attention");
    }
    sliding.push_back(type == "sliding_attention");
  }
  return sliding;
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
  std::optional<double> theta, partial;
  if (!keys.own_rope && config.has_value("rope_theta")) theta = config.positive_finite("rope_theta");
  RopeScaling scaling;
  if (keys.own_rope) {
    // the caller reads the rotary keys (Gemma 3's per layer type)
  } else if (config.has_value("rope_parameters")) {
    if (config.has_value("rope_scaling")) {
      config.fail("rope_scaling", "is " + describe(config.value("rope_scaling")) +
                                      " beside \"rope_parameters\"; give one of them");
    }
    scaling = read_rope_object(config.object("rope_parameters"), config, keys, *o.seq_len, theta, partial);
  } else if (config.has_value("rope_scaling")) {
    scaling = read_rope_object(config.object("rope_scaling"), config, keys, *o.seq_len, theta, partial);
  }
  if (!keys.own_rope) {
    o.rope_theta = theta.value_or(keys.default_theta);
    o.rope_scaling = scaling;
  }
  // The object's partial_rotary_factor first, then config.json's own key
  // (transformers' convert_rope_params_to_dict).
  if (!partial) partial = config.optional_number("partial_rotary_factor", 0.0, 1.0);
  if (partial && *partial != 1.0) {
    if (!keys.partial_rotary) {
      config.fail("partial_rotary_factor", strformat("is %g; accel-host's %s rotates every feature of a head",
                                                     *partial, family.c_str()));
    }
    o.partial_rotary_factor = *partial;
  }
  o.norm_eps = config.has_value("rms_norm_eps") ? config.positive_finite("rms_norm_eps") : keys.default_eps;
  if (!keys.own_activation) require_string(config, "hidden_act", {"silu"}, "accel-host's " + family + " uses silu");
  require_boolean(config, "attention_bias", false, "accel-host's " + family + " has no attention biases");
  require_boolean(config, "mlp_bias", false, "accel-host's " + family + " has no MLP biases");
  if (keys.tied) {
    o.tie_embeddings =
        config.has_value("tie_word_embeddings") ? config.boolean("tie_word_embeddings") : keys.tied_by_default;
  } else {
    require_boolean(config, "tie_word_embeddings", false, "accel-host's " + family + " keeps an untied lm_head");
  }
  if (const auto tp = config.optional_integer("pretraining_tp"); tp && *tp != 1) {
    config.fail("pretraining_tp", strformat("is %lld; accel-host's %s computes the projections whole "
                                            "(pretraining_tp 1)", static_cast<long long>(*tp), family.c_str()));
  }
  return o;
}

json rope_parameters_json(const model::GptConfig& shape) {
  json rope = rope_scaling_json(shape.rope_scaling);
  rope["rope_theta"] = shape.rope_theta;
  // transformers' dynamic reads its length from max_position_embeddings.
  if (shape.rope_scaling.kind == RopeScaling::Kind::dynamic) rope.erase("original_max_position_embeddings");
  if (shape.partial_rotary_factor != 1.0) rope["partial_rotary_factor"] = shape.partial_rotary_factor;
  return rope;
}

json rotary_decoder_json(const model::GptConfig& shape, const HfBridge& bridge) {
  return {
      {"architectures", {bridge.architecture}},
      {"model_type", bridge.model_type},
      {"vocab_size", shape.vocab_size},
      // dynamic scaling starts beyond max_position_embeddings: the length it had.
      {"max_position_embeddings", shape.rope_scaling.kind == RopeScaling::Kind::dynamic
                                      ? shape.rope_scaling.original_max_position
                                      : shape.seq_len},
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
         (allowed.sliding_window || shape.sliding_window == 0) && (allowed.block || shape.block.is_default()) &&
         (allowed.partial_rotary || shape.partial_rotary_factor == 1.0) &&
         (allowed.nope_layers || shape.nope_layers.empty()) &&
         (allowed.multipliers || (shape.embedding_multiplier == 1.0 && shape.residual_multiplier == 1.0 &&
                                  shape.logits_scaling == 1.0 && shape.attention_multiplier == 0.0)) &&
         (allowed.query_position_scale || shape.query_position_scale_beta == 0.0);
}

}  // namespace accel::checkpoint::bridge
