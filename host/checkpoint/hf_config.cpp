// config.json of GPT-2 and Llama checkpoints (see hf_config.h). Each reader
// takes every key it understands through sdk::JsonFields, so a wrong type,
// a fraction where an integer belongs, or a value out of range is refused
// with the key's name and the value as describe() shows it; keys it does not
// know (transformers writes dozens: token ids, generation defaults) are
// left alone, as transformers leaves them.
#include "host/checkpoint/hf_config.h"

#include <accel/sdk/input_file.hpp>
#include <accel/sdk/json_input.hpp>
#include <nlohmann/json.hpp>

#include <initializer_list>
#include <optional>
#include <stdexcept>

#include "host/model/model_limits.h"
#include "host/util/strformat.h"

namespace accel::checkpoint {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using sdk::describe;
using sdk::JsonFields;

// The same bound trainer_state.json puts on every dimension, so a model
// loaded from config.json can be saved and resumed.
constexpr int64_t kMaxDimension = model::kMaxModelDimension;

// A dimension: an integer in [min, kMaxDimension].
int64_t dimension(const JsonFields& config, const char* key, int64_t min = 1) {
  return config.integer(key, min, kMaxDimension);
}

// Refuses "architectures" unless every entry is one of `supported`.
void require_architectures(const JsonFields& config, std::initializer_list<const char*> supported,
                           const char* named) {
  if (!config.has_value("architectures")) return;
  for (const json& entry : config.array("architectures")) {
    bool known = false;
    for (const char* name : supported) known = known || (entry.is_string() && entry.get_ref<const std::string&>() == name);
    if (!known) {
      config.fail("architectures", "holds " + describe(entry) + ", which is not supported (supported: " + named + ")");
    }
  }
}

// Refuses a boolean `key` unless absent, null or `expected`.
void require_boolean(const JsonFields& config, const char* key, bool expected, const std::string& why) {
  if (config.has_value(key) && config.boolean(key) != expected) {
    config.fail(key, std::string("is ") + (expected ? "false" : "true") + "; " + why);
  }
}

// Refuses a string `key` unless absent, null or one of `accepted`.
void require_string(const JsonFields& config, const char* key, std::initializer_list<const char*> accepted,
                    const std::string& why) {
  if (!config.has_value(key)) return;
  const std::string value = config.string(key);
  for (const char* name : accepted) {
    if (value == name) return;
  }
  config.fail(key, "is " + describe(config.value(key)) + "; " + why);
}

// A dropout rate: a number in [0, 1]; a non-zero one is noted as ignored.
void note_dropout(const JsonFields& config, const char* key, std::vector<std::string>& ignored) {
  const std::optional<double> rate = config.optional_number(key, 0.0, 1.0);
  if (rate && *rate != 0.0) ignored.push_back(strformat("%s %g (accel-host trains without dropout)", key, *rate));
}

// `heads` divides `width` (attention splits the width into equal heads).
void require_heads_divide(const JsonFields& config, const char* width_key, int64_t width, const char* heads_key,
                          int64_t heads) {
  if (width % heads != 0) {
    config.fail(width_key, strformat("(%lld) must be a multiple of \"%s\" (%lld)", static_cast<long long>(width),
                                     heads_key, static_cast<long long>(heads)));
  }
}

// The host's shape from what the reader checked; make_gpt_config's own
// checks should find nothing left, but its word is final.
model::GptConfig build_shape(const std::string& where, const char* preset, const ModelOverrides& overrides) {
  try {
    return model::make_gpt_config(preset, overrides);
  } catch (const std::invalid_argument& e) {
    throw CheckpointError(where + ": " + e.what());
  }
}

// ---- GPT-2 (GPT2LMHeadModel) -----------------------------------------------

HfModelConfig parse_gpt2(const JsonFields& config) {
  require_architectures(config, {"GPT2LMHeadModel", "GPT2Model"}, "GPT2LMHeadModel");
  ModelOverrides o;
  o.vocab_size = dimension(config, "vocab_size", 2);
  o.seq_len = dimension(config, "n_positions");
  o.n_embd = dimension(config, "n_embd");
  o.n_layer = dimension(config, "n_layer");
  o.n_head = dimension(config, "n_head");
  require_heads_divide(config, "n_embd", *o.n_embd, "n_head", *o.n_head);
  require_string(config, "activation_function", {"gelu_new", "gelu_pytorch_tanh"},
                 "accel-host's GPT-2 uses the tanh GELU (gelu_new)");
  if (config.has_value("layer_norm_epsilon")) {
    const double epsilon = config.positive_finite("layer_norm_epsilon");
    if (epsilon != 1e-5) {
      config.fail("layer_norm_epsilon", "is " + describe(config.value("layer_norm_epsilon")) +
                                            "; accel-host's GPT-2 normalises with epsilon 1e-05");
    }
  }
  if (const auto inner = config.optional_integer("n_inner", 1, kMaxDimension); inner && *inner != 4 * *o.n_embd) {
    config.fail("n_inner", strformat("is %lld; accel-host's GPT-2 MLP is 4 * n_embd = %lld wide",
                                     static_cast<long long>(*inner), static_cast<long long>(4 * *o.n_embd)));
  }
  require_boolean(config, "scale_attn_weights", true, "accel-host's GPT-2 scales attention scores by 1/sqrt(head size)");
  require_boolean(config, "scale_attn_by_inverse_layer_idx", false, "accel-host's GPT-2 does not scale by the layer index");
  require_boolean(config, "reorder_and_upcast_attn", false, "accel-host's GPT-2 computes attention in the weights' dtype");
  require_boolean(config, "add_cross_attention", false, "accel-host's GPT-2 is a decoder without cross-attention");
  require_boolean(config, "tie_word_embeddings", true, "accel-host's GPT-2 ties the head to wte");
  HfModelConfig out;
  for (const char* key : {"resid_pdrop", "embd_pdrop", "attn_pdrop"}) note_dropout(config, key, out.ignored);
  out.shape = build_shape(config.where(), "gpt-tiny", o);
  return out;
}

// ---- Llama (LlamaForCausalLM) ----------------------------------------------

// rope_theta from transformers 5's "rope_parameters" or 4's "rope_theta" /
// "rope_scaling"; only the default (unscaled) rotary embedding is built.
double rope_theta(const JsonFields& config) {
  double theta = config.has_value("rope_theta") ? config.positive_finite("rope_theta") : 10000.0;
  if (config.has_value("rope_parameters")) {
    const JsonFields parameters = config.object("rope_parameters");
    // The type first: it names the variant a user chose ("linear"), where
    // its keys ("factor") would only hint at it.
    require_string(parameters, "rope_type", {"default"},
                   "accel-host's Llama builds the default rotary embedding only");
    for (const auto& item : parameters.json().items()) {
      if (item.key() != "rope_type" && item.key() != "rope_theta") {
        parameters.fail(item.key(), "is not supported (accel-host's Llama builds the default rotary embedding only)");
      }
    }
    if (parameters.has_value("rope_theta")) theta = parameters.positive_finite("rope_theta");
  }
  if (config.has_value("rope_scaling")) {
    config.fail("rope_scaling", "is " + describe(config.value("rope_scaling")) +
                                    "; accel-host's Llama builds the default rotary embedding only");
  }
  return theta;
}

// The keys Llama and Mixtral share (attention, norms, rotary, width).
ModelOverrides llama_shape(const JsonFields& config) {
  ModelOverrides o;
  o.vocab_size = dimension(config, "vocab_size", 2);
  o.seq_len = dimension(config, "max_position_embeddings");
  o.n_embd = dimension(config, "hidden_size");
  o.n_layer = dimension(config, "num_hidden_layers");
  o.n_head = dimension(config, "num_attention_heads");
  require_heads_divide(config, "hidden_size", *o.n_embd, "num_attention_heads", *o.n_head);
  const int64_t head_width = *o.n_embd / *o.n_head;
  if (head_width % 2 != 0) {
    config.fail("hidden_size", strformat("/ \"num_attention_heads\" = %lld is odd; rotary positions need an even "
                                         "head width", static_cast<long long>(head_width)));
  }
  o.n_kv_head = config.optional_integer("num_key_value_heads", 1, *o.n_head).value_or(*o.n_head);
  require_heads_divide(config, "num_attention_heads", *o.n_head, "num_key_value_heads", *o.n_kv_head);
  o.ffn_size = dimension(config, "intermediate_size");
  o.rope_theta = rope_theta(config);
  o.norm_eps = config.has_value("rms_norm_eps") ? config.positive_finite("rms_norm_eps") : 1e-6;
  if (const auto head_dim = config.optional_integer("head_dim", 1, kMaxDimension); head_dim && *head_dim != head_width) {
    config.fail("head_dim", strformat("is %lld; accel-host's Llama uses hidden_size / num_attention_heads = %lld",
                                      static_cast<long long>(*head_dim), static_cast<long long>(head_width)));
  }
  require_string(config, "hidden_act", {"silu"}, "accel-host's Llama uses silu");
  require_boolean(config, "attention_bias", false, "accel-host's Llama has no attention biases");
  require_boolean(config, "mlp_bias", false, "accel-host's Llama has no MLP biases");
  require_boolean(config, "tie_word_embeddings", false, "accel-host's Llama keeps an untied lm_head");
  if (const auto tp = config.optional_integer("pretraining_tp"); tp && *tp != 1) {
    config.fail("pretraining_tp", strformat("is %lld; accel-host's Llama computes the projections whole "
                                            "(pretraining_tp 1)", static_cast<long long>(*tp)));
  }
  return o;
}

HfModelConfig parse_llama(const JsonFields& config) {
  require_architectures(config, {"LlamaForCausalLM", "LlamaModel"}, "LlamaForCausalLM");
  const ModelOverrides o = llama_shape(config);
  HfModelConfig out;
  note_dropout(config, "attention_dropout", out.ignored);
  out.shape = build_shape(config.where(), "llama-tiny", o);
  return out;
}

// ---- Mixtral (MixtralForCausalLM) --------------------------------------------
// Llama's attention with a mixture of experts in every block.

// A training setting, not the model's: the run's own --moe-aux-loss-coef
// decides, but the value is kept for export-hf to write back.
void read_router_aux_loss_coef(const JsonFields& config, HfModelConfig& out) {
  const bool aux = config.has_value("output_router_logits") && config.boolean("output_router_logits");
  const auto coef = config.optional_number("router_aux_loss_coef", 0.0, 1e9);
  if (aux && coef && *coef != 0.0) {
    out.ignored.push_back(strformat("router_aux_loss_coef %g (the run's --moe-aux-loss-coef applies)", *coef));
  }
  out.keys.router_aux_loss_coef = coef;
}

HfModelConfig parse_mixtral(const JsonFields& config) {
  require_architectures(config, {"MixtralForCausalLM", "MixtralModel"}, "MixtralForCausalLM");
  ModelOverrides o = llama_shape(config);
  o.n_experts = dimension(config, "num_local_experts");
  o.experts_per_token = config.integer("num_experts_per_tok", 1, *o.n_experts);
  if (config.has_value("sliding_window")) {
    config.fail("sliding_window", "is " + describe(config.value("sliding_window")) +
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

// ---- Qwen2 (Qwen2ForCausalLM) and Qwen2-MoE (Qwen2MoeForCausalLM) ---------
// Llama's block with q, k and v biases; Qwen2-MoE's MLP is a mixture of
// experts with a shared expert behind a sigmoid gate in every layer.

// Sliding-window attention off: the host attends to the whole sequence.
void require_full_attention(const JsonFields& config) {
  require_boolean(config, "use_sliding_window", false, "accel-host attends to the whole sequence");
  if (!config.has_value("layer_types")) return;
  const nlohmann::json& types = config.value("layer_types");
  if (!types.is_array()) config.fail("layer_types", "must be a list, got " + describe(types));
  for (const nlohmann::json& type : types) {
    if (type != "full_attention") {
      config.fail("layer_types", "holds " + describe(type) + "; accel-host's layers are all full_attention");
    }
  }
}

HfModelConfig parse_qwen2(const JsonFields& config) {
  require_architectures(config, {"Qwen2ForCausalLM", "Qwen2Model"}, "Qwen2ForCausalLM");
  ModelOverrides o = llama_shape(config);
  o.qkv_bias = true;  // Qwen2's attention always has them
  require_full_attention(config);
  HfModelConfig out;
  note_dropout(config, "attention_dropout", out.ignored);
  out.shape = build_shape(config.where(), "llama-tiny", o);
  return out;
}

HfModelConfig parse_qwen2_moe(const JsonFields& config) {
  require_architectures(config, {"Qwen2MoeForCausalLM", "Qwen2MoeModel"}, "Qwen2MoeForCausalLM");
  ModelOverrides o = llama_shape(config);
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
                  "is " + describe(dense) + "; accel-host's Qwen2-MoE has experts in every layer ([])");
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

}  // namespace

HfModelConfig parse_hf_config(std::string_view text, const std::string& where) {
  try {
    const json document = sdk::parse_json(text, where);
    const JsonFields config(document, where);
    const std::optional<std::string> type = config.optional_string("model_type");
    if (type == "gpt2") return parse_gpt2(config);
    if (type == "llama") return parse_llama(config);
    if (type == "mixtral") return parse_mixtral(config);
    if (type == "qwen2") return parse_qwen2(config);
    if (type == "qwen2_moe") return parse_qwen2_moe(config);
    if (!type) config.fail("model_type", "is missing (supported: gpt2, llama, mixtral, qwen2, qwen2_moe)");
    config.fail("model_type", "is " + describe(config.value("model_type")) +
                                  ", which is not supported (supported: gpt2, llama, mixtral, qwen2, qwen2_moe)");
  } catch (const sdk::JsonInputError& e) {
    throw CheckpointError(e.what());
  }
}

HfModelConfig read_hf_config(const fs::path& dir) {
  const fs::path path = dir / "config.json";
  if (!fs::is_directory(dir)) throw CheckpointError("--init-from hf:" + dir.string() + ": not a directory");
  if (!fs::exists(path)) throw CheckpointError(dir.string() + ": no config.json (a transformers save_pretrained directory has one)");
  std::string text;
  try {
    text = sdk::read_input_file(path.string(), kMaxHfConfigBytes);
  } catch (const sdk::InputFileError& e) {
    throw CheckpointError(e.what());
  }
  return parse_hf_config(text, path.string());
}

// ---- Writing -----------------------------------------------------------------

std::string hf_config_json(const model::GptConfig& shape, const HfConfigKeys& keys) {
  switch (hf_family(shape)) {
    case HfFamily::gpt2: return hf_gpt2_config_json(shape);
    case HfFamily::llama: return hf_llama_config_json(shape);
    case HfFamily::mixtral: return hf_mixtral_config_json(shape, keys);
    case HfFamily::qwen2: return hf_qwen2_config_json(shape);
    case HfFamily::qwen2_moe: return hf_qwen2_moe_config_json(shape, keys);
  }
  throw CheckpointError("export-hf: no transformers family for " + shape.describe());
}

HfFamily hf_family(const model::GptConfig& shape) {
  if (shape.family != model::ModelFamily::llama) return HfFamily::gpt2;
  if (!shape.has_experts()) return shape.qkv_bias ? HfFamily::qwen2 : HfFamily::llama;
  // Qwen2-MoE's block always has a shared expert; Mixtral's none, and its
  // top-k weights renormalised.
  if (shape.shared_expert_size > 0) return HfFamily::qwen2_moe;
  if (shape.qkv_bias || !shape.normalize_top_k) {
    throw CheckpointError(
        "export-hf: a mixture of experts with attention biases or un-normalised top-k weights but no shared expert "
        "is no transformers model (MixtralForCausalLM has neither; Qwen2MoeForCausalLM always has a shared expert)");
  }
  return HfFamily::mixtral;
}

std::string hf_gpt2_config_json(const model::GptConfig& shape) {
  const json config = {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"vocab_size", shape.vocab_size},
      {"n_positions", shape.seq_len},
      {"n_embd", shape.n_embd},
      {"n_layer", shape.n_layer},
      {"n_head", shape.n_head},
      {"n_inner", nullptr},
      {"activation_function", "gelu_new"},
      {"layer_norm_epsilon", 1e-5},
      {"initializer_range", 0.02},
      {"resid_pdrop", 0.0},
      {"embd_pdrop", 0.0},
      {"attn_pdrop", 0.0},
      {"scale_attn_weights", true},
      {"scale_attn_by_inverse_layer_idx", false},
      {"reorder_and_upcast_attn", false},
      {"tie_word_embeddings", true},
      {"use_cache", true},
      {"dtype", "float32"},
  };
  return config.dump(2) + "\n";
}

std::string hf_llama_config_json(const model::GptConfig& shape) {
  const json config = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"vocab_size", shape.vocab_size},
      {"max_position_embeddings", shape.seq_len},
      {"hidden_size", shape.n_embd},
      {"intermediate_size", shape.ffn_size},
      {"num_hidden_layers", shape.n_layer},
      {"num_attention_heads", shape.n_head},
      {"num_key_value_heads", shape.n_kv_head},
      {"head_dim", shape.n_embd / shape.n_head},
      {"hidden_act", "silu"},
      {"rms_norm_eps", shape.norm_eps},
      {"rope_parameters", {{"rope_theta", shape.rope_theta}, {"rope_type", "default"}}},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"mlp_bias", false},
      {"pretraining_tp", 1},
      {"tie_word_embeddings", false},
      {"initializer_range", 0.02},
      {"use_cache", true},
      {"bos_token_id", nullptr},
      {"eos_token_id", nullptr},
      {"pad_token_id", nullptr},
      {"dtype", "float32"},
  };
  return config.dump(2) + "\n";
}

std::string hf_mixtral_config_json(const model::GptConfig& shape, const HfConfigKeys& keys) {
  const json config = {
      {"architectures", {"MixtralForCausalLM"}},
      {"model_type", "mixtral"},
      {"vocab_size", shape.vocab_size},
      {"max_position_embeddings", shape.seq_len},
      {"hidden_size", shape.n_embd},
      {"intermediate_size", shape.ffn_size},
      {"num_hidden_layers", shape.n_layer},
      {"num_attention_heads", shape.n_head},
      {"num_key_value_heads", shape.n_kv_head},
      {"head_dim", shape.n_embd / shape.n_head},
      {"num_local_experts", shape.n_experts},
      {"num_experts_per_tok", shape.experts_per_token},
      {"hidden_act", "silu"},
      {"rms_norm_eps", shape.norm_eps},
      {"rope_parameters", {{"rope_theta", shape.rope_theta}, {"rope_type", "default"}}},
      {"sliding_window", nullptr},
      {"router_jitter_noise", 0.0},
      {"output_router_logits", false},
      {"router_aux_loss_coef", keys.router_aux_loss_coef.value_or(0.0)},
      {"attention_dropout", 0.0},
      {"tie_word_embeddings", false},
      {"initializer_range", 0.02},
      {"use_cache", true},
      {"bos_token_id", nullptr},
      {"eos_token_id", nullptr},
      {"pad_token_id", nullptr},
      {"dtype", "float32"},
  };
  return config.dump(2) + "\n";
}

std::string hf_qwen2_config_json(const model::GptConfig& shape) {
  const json config = {
      {"architectures", {"Qwen2ForCausalLM"}},
      {"model_type", "qwen2"},
      {"vocab_size", shape.vocab_size},
      {"max_position_embeddings", shape.seq_len},
      {"hidden_size", shape.n_embd},
      {"intermediate_size", shape.ffn_size},
      {"num_hidden_layers", shape.n_layer},
      {"num_attention_heads", shape.n_head},
      {"num_key_value_heads", shape.n_kv_head},
      {"hidden_act", "silu"},
      {"rms_norm_eps", shape.norm_eps},
      {"rope_parameters", {{"rope_theta", shape.rope_theta}, {"rope_type", "default"}}},
      {"use_sliding_window", false},
      {"sliding_window", nullptr},
      {"attention_dropout", 0.0},
      {"tie_word_embeddings", false},
      {"initializer_range", 0.02},
      {"use_cache", true},
      {"bos_token_id", nullptr},
      {"eos_token_id", nullptr},
      {"pad_token_id", nullptr},
      {"dtype", "float32"},
  };
  return config.dump(2) + "\n";
}

std::string hf_qwen2_moe_config_json(const model::GptConfig& shape, const HfConfigKeys& keys) {
  const json config = {
      {"architectures", {"Qwen2MoeForCausalLM"}},
      {"model_type", "qwen2_moe"},
      {"vocab_size", shape.vocab_size},
      {"max_position_embeddings", shape.seq_len},
      {"hidden_size", shape.n_embd},
      {"intermediate_size", keys.intermediate_size.value_or(shape.ffn_size)},  // mlp_only_layers' width: none run
      {"moe_intermediate_size", shape.ffn_size},
      {"shared_expert_intermediate_size", shape.shared_expert_size},
      {"num_experts", shape.n_experts},
      {"num_experts_per_tok", shape.experts_per_token},
      {"norm_topk_prob", shape.normalize_top_k},
      {"qkv_bias", shape.qkv_bias},
      {"decoder_sparse_step", 1},
      {"mlp_only_layers", json::array()},
      {"num_hidden_layers", shape.n_layer},
      {"num_attention_heads", shape.n_head},
      {"num_key_value_heads", shape.n_kv_head},
      {"hidden_act", "silu"},
      {"rms_norm_eps", shape.norm_eps},
      {"rope_parameters", {{"rope_theta", shape.rope_theta}, {"rope_type", "default"}}},
      {"use_sliding_window", false},
      {"output_router_logits", false},
      {"router_aux_loss_coef", keys.router_aux_loss_coef.value_or(0.0)},
      {"attention_dropout", 0.0},
      {"tie_word_embeddings", false},
      {"initializer_range", 0.02},
      {"use_cache", true},
      {"bos_token_id", nullptr},
      {"eos_token_id", nullptr},
      {"pad_token_id", nullptr},
      {"dtype", "float32"},
  };
  return config.dump(2) + "\n";
}

}  // namespace accel::checkpoint
