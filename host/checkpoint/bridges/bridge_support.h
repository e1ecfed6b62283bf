// What the Hugging Face bridges (checkpoint/bridges/*.cpp) share: reading
// dimensions, flags and dropout rates by the one JSON rule, the keys every
// rotary decoder of transformers has (Llama's: attention, norms, rotary
// embedding, MLP width), and writing them back. Internal to the bridges.
#pragma once

#include <accel/sdk/json_input.hpp>
#include <nlohmann/json.hpp>

#include <functional>
#include <initializer_list>
#include <optional>
#include <optional>
#include <string>
#include <vector>

#include "host/checkpoint/hf_bridge.h"
#include "host/cli/run_config.h"

namespace accel::checkpoint::bridge {

using sdk::JsonFields;

// A dimension: an integer in [min, kMaxModelDimension].
int64_t dimension(const JsonFields& config, const char* key, int64_t min = 1);
// Refuses "architectures" unless every entry is one of `supported`.
void require_architectures(const JsonFields& config, std::initializer_list<const char*> supported, const char* named);
// Refuses a boolean `key` unless absent, null or `expected`.
void require_boolean(const JsonFields& config, const char* key, bool expected, const std::string& why);
// Refuses a string `key` unless absent, null or one of `accepted`.
void require_string(const JsonFields& config, const char* key, std::initializer_list<const char*> accepted,
                    const std::string& why);
// A dropout rate in [0, 1]; a non-zero one is noted as ignored.
void note_dropout(const JsonFields& config, const char* key, std::vector<std::string>& ignored);
// `heads` divides `width`.
void require_heads_divide(const JsonFields& config, const char* width_key, int64_t width, const char* heads_key,
                          int64_t heads);
// Sliding-window attention off (Qwen2's and Qwen3's use_sliding_window,
// layer_types all full_attention).
void require_full_attention(const JsonFields& config);
// transformers 5's rope_parameters keyed by layer type (Gemma 3, OLMo 3):
// the full layers' object read by `read_full` (its base into `full_theta`),
// the sliding layers' by read_rope_object (its base into `local_theta`) and
// refused when scaled; the older rope_scaling key, which the config classes
// merge into the full layers' parameters, read by `read_full` too.
using FullRopeReader = std::function<RopeScaling(const JsonFields& rope, std::optional<double>& theta)>;
RopeScaling read_rope_by_layer_type(const JsonFields& config, const std::string& family,
                                    const FullRopeReader& read_full, std::optional<double>& full_theta,
                                    std::optional<double>& local_theta);
// transformers' layer_types ("sliding_attention" / "full_attention", one per
// layer) as BlockChoices::sliding_layers; without the key, every
// `pattern`-th layer full and the others sliding (Gemma's and OLMo 3's rule).
std::vector<bool> read_sliding_layers(const JsonFields& config, int64_t layers, int64_t pattern,
                                      const std::string& family);
// router_aux_loss_coef: kept in out.keys for export-hf, and noted as ignored
// when output_router_logits asks for it (the run's --moe-aux-loss-coef decides).
void read_router_aux_loss_coef(const JsonFields& config, HfModelConfig& out);

// The host's shape from what a reader checked: make_gpt_config on `preset`
// with `overrides`; its refusal becomes CheckpointError naming `where`.
model::GptConfig build_shape(const std::string& where, const char* preset, const ModelOverrides& overrides);

// What a rotary decoder's reader accepts beyond Llama's base.
struct RotaryDecoderKeys {
  const char* family;        // in messages: "accel-host's <family> ..."
  bool head_dim = false;     // "head_dim" may differ from hidden_size / num_attention_heads
  bool tied = false;         // "tie_word_embeddings" may be true
  bool own_activation = false;  // the caller reads the activation (Gemma's "hidden_activation")
  bool own_rope = false;        // the caller reads the rotary keys (Gemma 3's per layer type)
  bool partial_rotary = false;  // "partial_rotary_factor" may be below 1 (Phi-3/4)
  // Phi-3's rope: default or longrope only, its top-level
  // original_max_position_embeddings winning over the object's.
  bool phi3_rope = false;
  // The family's config class defaults, for a file without the key.
  double default_theta = 10000.0;
  bool tied_by_default = false;
  double default_eps = 1e-6;
};
// One rope object ("rope_parameters", or the older "rope_scaling" whose type
// may sit under "type") of a type that needs no sequence length (default,
// llama3, linear: Gemma 3's per layer type), its "rope_theta" into `theta`
// when present; every other type and key refused by name.
RopeScaling read_rope_object(const JsonFields& rope, std::optional<double>& theta);
// The keys every rotary decoder shares: vocabulary, positions, width, layers,
// heads and key/value heads, MLP width, rms_norm_eps, the rotary embedding
// ("rope_theta", transformers 5's "rope_parameters" or the older
// "rope_scaling": every type of checkpoint/rope_json.h), activation,
// biases, tying.
ModelOverrides rotary_decoder_shape(const JsonFields& config, const RotaryDecoderKeys& keys);

// config.json's keys for those fields (the caller adds its family's own).
nlohmann::json rotary_decoder_json(const model::GptConfig& shape, const HfBridge& bridge);
// The keys that say attention is over the whole sequence (Qwen2's, Qwen3's),
// and the router's training keys (the MoE bridges'): output_router_logits
// false and the run's router_aux_loss_coef (unset: 0, --moe-aux-loss-coef's
// default).
void add_full_attention_keys(nlohmann::json& config);
void add_router_training_keys(nlohmann::json& config, const HfConfigKeys& keys);
// The "rope_parameters" of `shape`.
nlohmann::json rope_parameters_json(const model::GptConfig& shape);
// Whether `shape` is a dense rotary decoder with none of the choices in
// `allowed`'s complement (the bridges' writes()).
struct DenseChoices {
  bool qkv_bias = false, head_dim = false, tied = false, qk_norm = false, sliding_window = false;
  bool block = false;  // BlockChoices other than Llama's (the caller checks which)
  bool partial_rotary = false, nope_layers = false, multipliers = false;
  bool query_position_scale = false;  // Ministral 3's llama_4_scaling_beta
};
bool dense_rotary_decoder_with(const model::GptConfig& shape, const DenseChoices& allowed);

}  // namespace accel::checkpoint::bridge
