// Hugging Face config.json is read by the one JSON rule: every field a GPT-2
// or Llama reader takes is mutated to a wrong type or an out-of-range value
// and must be refused with one bounded line naming the file and the key.
// Regressions pinned here: a wrong-typed value nested 300,000 deep crashed
// the host (its refusal printed the value with dump(), which recursed);
// rms_norm_eps 0 trained and saved a checkpoint nothing could read back and
// -1.0 gave a NaN loss; "vocab_size": 256.9 ran as 256 and 1e19 was
// reported as "got -9223372036854775808". Also: what export-hf writes
// parses back to the same shape, and a FIFO config.json is refused without
// blocking.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <tuple>

#include <nlohmann/json.hpp>

#include "host/checkpoint/hf_bridge.h"
#include "host/checkpoint/hf_config.h"

namespace accel::checkpoint {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

json gpt2_json() {
  return json::parse(R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 256,
    "n_positions": 32, "n_embd": 64, "n_layer": 2, "n_head": 4, "n_inner": null,
    "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05, "resid_pdrop": 0.1, "embd_pdrop": 0.0,
    "attn_pdrop": 0.0, "scale_attn_weights": true, "tie_word_embeddings": true, "bos_token_id": 50256})");
}

json llama_json() {
  return json::parse(R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 256,
    "max_position_embeddings": 64, "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "hidden_act": "silu",
    "rms_norm_eps": 1e-06, "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"},
    "attention_bias": false, "attention_dropout": 0.0, "mlp_bias": false, "pretraining_tp": 1,
    "tie_word_embeddings": false})");
}

json mixtral_json() {
  return json::parse(R"({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "vocab_size": 256,
    "max_position_embeddings": 64, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": null, "hidden_act": "silu",
    "rms_norm_eps": 1e-05, "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
    "num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": null, "router_jitter_noise": 0.0,
    "output_router_logits": true, "router_aux_loss_coef": 0.02, "tie_word_embeddings": false})");
}

// transformers 5's Qwen2Config and Qwen2MoeConfig as save_pretrained writes them.
json qwen2_json() {
  return json::parse(R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 256,
    "max_position_embeddings": 32, "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_act": "silu", "rms_norm_eps": 1e-06,
    "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}, "layer_types": ["full_attention",
    "full_attention"], "max_window_layers": 28, "sliding_window": null, "use_sliding_window": false,
    "attention_dropout": 0.0, "tie_word_embeddings": false})");
}

json qwen2_moe_json() {
  return json::parse(R"({"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "vocab_size": 256,
    "max_position_embeddings": 32, "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 96,
    "shared_expert_intermediate_size": 80, "num_experts": 4, "num_experts_per_tok": 2, "norm_topk_prob": false,
    "qkv_bias": true, "decoder_sparse_step": 1, "mlp_only_layers": [], "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_act": "silu", "rms_norm_eps": 1e-06,
    "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}, "layer_types": ["full_attention",
    "full_attention"], "sliding_window": 0, "use_sliding_window": false, "output_router_logits": false,
    "router_aux_loss_coef": 0.001, "tie_word_embeddings": false})");
}

constexpr const char* kWhere = "hf/config.json";

std::string error_of_text(const std::string& text) {
  try {
    parse_hf_config(text, kWhere);
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}
std::string error_of(const json& j) { return error_of_text(j.dump()); }

// The error must be one line naming the file, under 400 characters.
void expect_refused(const std::string& error, const std::string& fragment, const std::string& context) {
  EXPECT_EQ(error.rfind(std::string(kWhere) + ": ", 0), 0u) << context << ": " << error;
  EXPECT_NE(error.find(fragment), std::string::npos) << context << ": " << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << context << ": " << error;
  EXPECT_LT(error.size(), 400u) << context;
}

// `depth` nested arrays around 1: dump() of it recursed once per level.
std::string nested_arrays(size_t depth) { return std::string(depth, '[') + "1" + std::string(depth, ']'); }

TEST(HfConfig, BothFamiliesParse) {
  const HfModelConfig gpt2 = parse_hf_config(gpt2_json().dump(), kWhere);
  EXPECT_EQ(gpt2.shape.family, model::ModelFamily::gpt2);
  EXPECT_EQ(gpt2.shape.seq_len, 32);
  EXPECT_EQ(gpt2.shape.vocab_size, 256);
  ASSERT_EQ(gpt2.ignored.size(), 1u);
  EXPECT_NE(gpt2.ignored[0].find("resid_pdrop 0.1"), std::string::npos);
  const HfModelConfig llama = parse_hf_config(llama_json().dump(), kWhere);
  EXPECT_EQ(llama.shape.family, model::ModelFamily::llama);
  EXPECT_EQ(llama.shape.n_kv_head, 2);
  EXPECT_EQ(llama.shape.ffn_size, 176);
  EXPECT_EQ(llama.shape.rope_theta, 500000.0);
  EXPECT_EQ(llama.shape.norm_eps, 1e-6);
}

// Every key of these transformers-written files is read by its bridge or
// inert (bridges/inert_keys.h); any other is named, one line, never dropped.
TEST(HfConfig, AKeyNoBridgeReadsIsNamed) {
  for (const json& j : {gpt2_json(), llama_json(), mixtral_json(), qwen2_json(), qwen2_moe_json()}) {
    for (const std::string& line : parse_hf_config(j.dump(), kWhere).ignored) {
      EXPECT_EQ(line.find("does not read"), std::string::npos) << j["model_type"] << ": " << line;
    }
  }
  json j = llama_json();
  j["use_cache"] = true;      // inert: left alone without a word
  j["rope_interleaved"] = true;  // no bridge reads it
  const HfModelConfig llama = parse_hf_config(j.dump(), kWhere);
  ASSERT_EQ(llama.ignored.size(), 1u);
  EXPECT_EQ(llama.ignored[0],
            "\"rope_interleaved\", a key accel-host's Llama bridge does not read (if it changes the model, this run "
            "differs from transformers)");
}

TEST(HfConfig, AMixtralIsALlamaWithExperts) {
  const HfModelConfig mixtral = parse_hf_config(mixtral_json().dump(), kWhere);
  EXPECT_EQ(mixtral.shape.family, model::ModelFamily::llama);
  EXPECT_EQ(mixtral.shape.n_experts, 8);
  EXPECT_EQ(mixtral.shape.experts_per_token, 2);
  EXPECT_EQ(mixtral.shape.ffn_size, 96);
  EXPECT_EQ(mixtral.shape.rope_theta, 1e6);
  // The aux coefficient is the run's to choose: noted, never applied.
  ASSERT_EQ(mixtral.ignored.size(), 1u);
  EXPECT_NE(mixtral.ignored[0].find("router_aux_loss_coef 0.02"), std::string::npos);
  json j = mixtral_json();
  j["num_experts_per_tok"] = 9;
  expect_refused(error_of(j), "\"num_experts_per_tok\"", "more than the experts");
  j = mixtral_json();
  j["sliding_window"] = 4096;
  expect_refused(error_of(j), "\"sliding_window\" is 4096; accel-host's Mixtral attends to the whole sequence",
                 "sliding window");
}

TEST(HfConfig, Qwen2IsALlamaWithAttentionBiasesAndQwen2MoeAddsASharedExpert) {
  const model::GptConfig qwen2 = parse_hf_config(qwen2_json().dump(), kWhere).shape;
  EXPECT_EQ(qwen2.family, model::ModelFamily::llama);
  EXPECT_TRUE(qwen2.qkv_bias);
  EXPECT_FALSE(qwen2.has_experts());
  EXPECT_STREQ(hf_bridge_for(qwen2).model_type, "qwen2");
  const model::GptConfig moe = parse_hf_config(qwen2_moe_json().dump(), kWhere).shape;
  EXPECT_TRUE(moe.qkv_bias);
  EXPECT_EQ(moe.n_experts, 4);
  EXPECT_EQ(moe.ffn_size, 96);  // moe_intermediate_size: intermediate_size is the dense MLP no layer has
  EXPECT_EQ(moe.shared_expert_size, 80);
  EXPECT_FALSE(moe.normalize_top_k);
  EXPECT_STREQ(hf_bridge_for(moe).model_type, "qwen2_moe");
  json j = qwen2_moe_json();
  j.erase("qkv_bias");  // transformers' default: the biases
  j.erase("norm_topk_prob");  // and un-normalised weights
  EXPECT_EQ(parse_hf_config(j.dump(), kWhere).shape, moe);
  j["qkv_bias"] = false;
  EXPECT_FALSE(parse_hf_config(j.dump(), kWhere).shape.qkv_bias);
  const std::pair<const char*, json> refused[] = {
      {"decoder_sparse_step", 2}, {"mlp_only_layers", json::array({0})}, {"use_sliding_window", true},
      {"layer_types", json::array({"full_attention", "sliding_attention"})}, {"shared_expert_intermediate_size", 0}};
  for (const auto& [key, value] : refused) {
    j = qwen2_moe_json();
    j[key] = value;
    expect_refused(error_of(j), std::string("\"") + key + "\"", key);
  }
  j = qwen2_json();
  j["tie_word_embeddings"] = true;  // Qwen2.5-0.5B's
  EXPECT_TRUE(parse_hf_config(j.dump(), kWhere).shape.tie_embeddings);
  // A mixture of experts no transformers class is: export-hf refuses it.
  model::GptConfig neither = moe;
  neither.shared_expert_size = 0;
  EXPECT_THROW(hf_bridge_for(neither), CheckpointError);
}

// transformers 5.23's Qwen3Config and MistralConfig as save_pretrained
// writes them, and a Llama 3.2's rope_parameters and tied head.
json qwen3_json() {
  json j = qwen2_json();
  j["architectures"] = {"Qwen3ForCausalLM"};
  j["model_type"] = "qwen3";
  j["head_dim"] = 24;
  j["attention_bias"] = false;
  return j;
}
json mistral_json() {
  json j = llama_json();
  j["architectures"] = {"MistralForCausalLM"};
  j["model_type"] = "mistral";
  j["sliding_window"] = 8;
  for (const char* key : {"attention_bias", "mlp_bias", "pretraining_tp"}) j.erase(key);
  return j;
}
json llama3_json() {
  json j = llama_json();
  j["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 32.0},
                          {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 8192}};
  j["tie_word_embeddings"] = true;
  return j;
}

// transformers 5.23's Gemma2Config, Gemma3TextConfig and Olmo2Config as
// save_pretrained writes them (small shapes).
json gemma2_json() {
  return json::parse(R"({"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "vocab_size": 256,
    "max_position_embeddings": 32, "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "hidden_activation": "gelu_pytorch_tanh",
    "rms_norm_eps": 1e-06, "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
    "attention_bias": false, "attention_dropout": 0.0, "query_pre_attn_scalar": 24, "sliding_window": 8,
    "layer_types": ["sliding_attention", "full_attention"], "final_logit_softcapping": 30.0,
    "attn_logit_softcapping": 50.0, "use_bidirectional_attention": null, "tie_word_embeddings": true,
    "pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 2})");
}
json gemma3_json() {
  return json::parse(R"({"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "vocab_size": 256,
    "max_position_embeddings": 32, "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "hidden_activation": "gelu_pytorch_tanh",
    "rms_norm_eps": 1e-06, "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}}, "attention_bias": false,
    "attention_dropout": 0.0, "query_pre_attn_scalar": 256, "sliding_window": 8,
    "layer_types": ["sliding_attention", "full_attention"], "final_logit_softcapping": null,
    "attn_logit_softcapping": null, "use_bidirectional_attention": false, "_sliding_window_pattern": 6,
    "tie_word_embeddings": true})");
}
json olmo2_json() {
  return json::parse(R"({"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "vocab_size": 256,
    "max_position_embeddings": 32, "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_act": "silu",
    "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}, "attention_bias": false,
    "attention_dropout": 0.0, "rms_norm_eps": 1e-05, "tie_word_embeddings": false, "pad_token_id": 1})");
}

TEST(HfConfig, GemmaAndOlmo2SetTheBlocksChoices) {
  const model::GptConfig gemma2 = parse_hf_config(gemma2_json().dump(), kWhere).shape;
  EXPECT_EQ(gemma2.block.norm_placement, BlockChoices::NormPlacement::sandwich);
  EXPECT_TRUE(gemma2.block.norm_plus_one);
  EXPECT_EQ(gemma2.block.mlp_activation, BlockChoices::MlpActivation::gelu_tanh);
  EXPECT_TRUE(gemma2.block.scale_embeddings);
  EXPECT_EQ(gemma2.block.query_pre_attn_scalar, 24.0);
  EXPECT_EQ(gemma2.block.attn_logit_softcap, 50.0);
  EXPECT_EQ(gemma2.block.final_logit_softcap, 30.0);
  EXPECT_EQ(gemma2.block.sliding_layers, (std::vector<bool>{true, false}));
  EXPECT_EQ(gemma2.sliding_window, 8);
  EXPECT_TRUE(gemma2.tie_embeddings);
  EXPECT_STREQ(hf_bridge_for(gemma2).model_type, "gemma2");
  // Without the keys, Gemma2Config's defaults: caps 50 and 30, a window of
  // 4096 on every other layer, a tied head.
  json j = gemma2_json();
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping", "sliding_window", "layer_types",
                          "tie_word_embeddings", "query_pre_attn_scalar"}) {
    j.erase(key);
  }
  const model::GptConfig defaults = parse_hf_config(j.dump(), kWhere).shape;
  EXPECT_EQ(defaults.block.attn_logit_softcap, 50.0);
  EXPECT_EQ(defaults.block.query_pre_attn_scalar, 256.0);
  EXPECT_EQ(defaults.sliding_window, 4096);
  EXPECT_EQ(defaults.block.sliding_layers, (std::vector<bool>{true, false}));
  EXPECT_TRUE(defaults.tie_embeddings);
  j = gemma2_json();
  j["query_pre_attn_scalar"] = 16;  // head_dim: the default scale
  EXPECT_EQ(parse_hf_config(j.dump(), kWhere).shape.block.query_pre_attn_scalar, 0.0);
  j = gemma2_json();
  j["attn_logit_softcapping"] = nullptr;
  j["final_logit_softcapping"] = nullptr;
  EXPECT_EQ(parse_hf_config(j.dump(), kWhere).shape.block.attn_logit_softcap, 0.0);

  const HfModelConfig gemma3 = parse_hf_config(gemma3_json().dump(), kWhere);
  EXPECT_TRUE(gemma3.shape.qk_norm);
  EXPECT_EQ(gemma3.shape.rope_theta, 1e6);
  EXPECT_EQ(gemma3.shape.block.rope_local_theta, 10000.0);
  EXPECT_EQ(gemma3.shape.block.final_logit_softcap, 0.0);
  EXPECT_STREQ(hf_bridge_for(gemma3.shape).model_type, "gemma3_text");
  // transformers 4's keys say the same; without layer_types, five sliding to one full.
  j = gemma3_json();
  j.erase("rope_parameters");
  j["rope_theta"] = 1e6;
  j["rope_local_base_freq"] = 10000.0;
  EXPECT_EQ(parse_hf_config(j.dump(), kWhere).shape, gemma3.shape);
  j.erase("layer_types");
  j["num_hidden_layers"] = 7;
  EXPECT_EQ(parse_hf_config(j.dump(), kWhere).shape.block.sliding_layers,
            (std::vector<bool>{true, true, true, true, true, false, true}));

  // Linear scaling on the full layers (Gemma 3 4B-27B's factor 8).
  j = gemma3_json();
  j["rope_parameters"]["full_attention"] = {{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 1e6}};
  const model::GptConfig linear = parse_hf_config(j.dump(), kWhere).shape;
  EXPECT_EQ(linear.rope_scaling.kind, RopeScaling::Kind::linear);
  EXPECT_EQ(linear.rope_scaling.factor, 8.0);
  EXPECT_EQ(parse_hf_config(hf_config_json(linear, {}), kWhere).shape, linear);
  j["rope_parameters"]["full_attention"]["partial_rotary_factor"] = 0.5;
  expect_refused(error_of(j), "\"rope_parameters.full_attention.partial_rotary_factor\" is not supported",
                 "partial rotary");

  const model::GptConfig olmo2 = parse_hf_config(olmo2_json().dump(), kWhere).shape;
  EXPECT_EQ(olmo2.block.norm_placement, BlockChoices::NormPlacement::post);
  EXPECT_TRUE(olmo2.block.qk_norm_whole);
  EXPECT_FALSE(olmo2.qk_norm);
  EXPECT_FALSE(olmo2.tie_embeddings);
  EXPECT_STREQ(hf_bridge_for(olmo2).model_type, "olmo2");

  // What changes the arithmetic and is not built is refused by name.
  const std::tuple<json, json, const char*> refused[] = {
      {gemma2_json(), json{{"hidden_activation", "gelu"}}, "\"hidden_activation\" is \"gelu\""},
      {gemma2_json(), json{{"use_bidirectional_attention", true}}, "\"use_bidirectional_attention\""},
      {gemma2_json(), json{{"layer_types", {"full_attention"}}}, "\"layer_types\" names 1 layers"},
      {gemma2_json(), json{{"layer_types", {"chunked_attention", "full_attention"}}}, "\"layer_types\" holds"},
      {gemma2_json(), json{{"sliding_window", nullptr}}, "\"sliding_window\" is null, but layer_types"},
      {gemma2_json(), json{{"attention_bias", true}}, "\"attention_bias\""},
      {gemma3_json(), json{{"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1e6}}}},
       "\"rope_parameters.rope_theta\" is not a known field"},
      {gemma3_json(),
       json{{"rope_parameters", {{"sliding_attention", {{"rope_type", "yarn"}, {"factor", 2.0}}}}}},
       "\"rope_parameters.sliding_attention.rope_type\" is \"yarn\""},
      {olmo2_json(), json{{"attention_bias", true}}, "\"attention_bias\""},
  };
  for (const auto& [base, changes, fragment] : refused) {
    j = base;
    j.update(changes);
    expect_refused(error_of(j), fragment, changes.dump());
  }
  j = gemma2_json();
  j.erase("head_dim");
  expect_refused(error_of(j), "\"head_dim\" is missing", "gemma2 without head_dim");
}

// The rope types of issue 51 on a Llama (head_dim 16: 8 frequencies), and
// transformers 5.23's Phi3Config (longrope, partial rotary, its own
// original_max_position_embeddings), SmolLM3Config and GraniteConfig as
// save_pretrained writes them.
json llama_rope_json(json rope) {
  json j = llama_json();
  rope["rope_theta"] = 10000.0;
  j["rope_parameters"] = rope;
  return j;
}
std::vector<json> rope_type_jsons() {
  const std::vector<double> factors = {1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5};
  return {llama_rope_json({{"rope_type", "linear"}, {"factor", 4.0}}),
          llama_rope_json({{"rope_type", "dynamic"}, {"factor", 2.0}}),
          llama_rope_json({{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 16},
                           {"beta_fast", 16.0}, {"mscale", 0.5}, {"mscale_all_dim", 1.0}, {"truncate", false}}),
          llama_rope_json({{"rope_type", "longrope"}, {"short_factor", factors}, {"long_factor", factors},
                           {"original_max_position_embeddings", 16}, {"attention_factor", 1.25}})};
}
json phi3_json() {
  json j = llama_json();
  for (const char* key : {"attention_bias", "mlp_bias", "pretraining_tp", "head_dim"}) j.erase(key);
  j["architectures"] = {"Phi3ForCausalLM"};
  j["model_type"] = "phi3";
  j["original_max_position_embeddings"] = 16;
  j["resid_pdrop"] = 0.0;
  j["embd_pdrop"] = 0.0;
  j["sliding_window"] = nullptr;
  j["tie_word_embeddings"] = true;
  j["rope_parameters"] = {{"rope_type", "longrope"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.75},
                          {"short_factor", {1.0, 1.5, 2.0, 2.5, 3.0, 3.5}},
                          {"long_factor", {2.0, 3.0, 4.0, 5.0, 6.0, 7.0}}};
  return j;
}
json smollm3_json() {
  json j = llama_json();
  j["architectures"] = {"SmolLM3ForCausalLM"};
  j["model_type"] = "smollm3";
  j["num_hidden_layers"] = 4;
  j["no_rope_layers"] = {1, 1, 1, 0};
  j["no_rope_layer_interval"] = 4;
  j["use_sliding_window"] = false;
  j["sliding_window"] = nullptr;
  j["layer_types"] = {"full_attention", "full_attention", "full_attention", "full_attention"};
  j["tie_word_embeddings"] = true;
  j.erase("pretraining_tp");
  return j;
}
json granite_json() {
  json j = llama_json();
  j["architectures"] = {"GraniteForCausalLM"};
  j["model_type"] = "granite";
  j["embedding_multiplier"] = 12.0;
  j["residual_multiplier"] = 0.22;
  j["logits_scaling"] = 8.0;
  j["attention_multiplier"] = 0.015625;
  j.erase("pretraining_tp");
  j.erase("head_dim");
  return j;
}

TEST(HfConfig, Issue51sFamiliesAndRopeTypesSetTheirFields) {
  const std::vector<json> ropes = rope_type_jsons();
  const RopeScaling::Kind kinds[] = {RopeScaling::Kind::linear, RopeScaling::Kind::dynamic, RopeScaling::Kind::yarn,
                                     RopeScaling::Kind::longrope};
  for (size_t i = 0; i < ropes.size(); ++i) {
    const model::GptConfig shape = parse_hf_config(ropes[i].dump(), kWhere).shape;
    EXPECT_EQ(shape.rope_scaling.kind, kinds[i]) << ropes[i].dump();
    EXPECT_STREQ(hf_bridge_for(shape).model_type, "llama");
  }
  // dynamic scales from max_position_embeddings; longrope's factor is the
  // ratio of the two lengths when the file gives none.
  EXPECT_EQ(parse_hf_config(ropes[1].dump(), kWhere).shape.rope_scaling.original_max_position, 64);
  const HfModelConfig phi3 = parse_hf_config(phi3_json().dump(), kWhere);
  EXPECT_EQ(phi3.shape.partial_rotary_factor, 0.75);
  EXPECT_EQ(phi3.shape.rotary_dim(), 12);
  EXPECT_EQ(phi3.shape.rope_scaling.original_max_position, 16);
  EXPECT_EQ(phi3.shape.rope_scaling.factor, 4.0);
  EXPECT_EQ(phi3.keys.model_type, "phi3");
  EXPECT_STREQ(hf_bridge_for(phi3.shape, phi3.keys).model_type, "phi3");
  const model::GptConfig smollm3 = parse_hf_config(smollm3_json().dump(), kWhere).shape;
  EXPECT_EQ(smollm3.nope_layers, std::vector<int64_t>{3});
  EXPECT_STREQ(hf_bridge_for(smollm3).model_type, "smollm3");
  json defaulted = smollm3_json();
  for (const char* key : {"no_rope_layers", "rope_parameters", "tie_word_embeddings"}) defaulted.erase(key);
  const model::GptConfig smollm3_defaults = parse_hf_config(defaulted.dump(), kWhere).shape;
  EXPECT_EQ(smollm3_defaults.nope_layers, std::vector<int64_t>{3});  // every 4th layer
  EXPECT_EQ(smollm3_defaults.rope_theta, 2000000.0);
  EXPECT_TRUE(smollm3_defaults.tie_embeddings);
  const model::GptConfig granite = parse_hf_config(granite_json().dump(), kWhere).shape;
  EXPECT_EQ(granite.embedding_multiplier, 12.0);
  EXPECT_EQ(granite.residual_multiplier, 0.22);
  EXPECT_EQ(granite.logits_scaling, 8.0);
  EXPECT_EQ(granite.attention_multiplier, 0.015625);
  EXPECT_STREQ(hf_bridge_for(granite).model_type, "granite");
  // What each family does not build is refused by name.
  const std::pair<json, const char*> refused[] = {
      {json{{"model_type", "phi3"}, {"rope_parameters", {{"rope_type", "yarn"}, {"factor", 2.0}}}},
       "\"rope_parameters.rope_type\" is \"yarn\""},
      {json{{"model_type", "smollm3"}, {"use_sliding_window", true}}, "\"use_sliding_window\""},
      {json{{"model_type", "smollm3"}, {"no_rope_layers", {1, 0}}}, "\"no_rope_layers\" holds 2 entries"},
      {json{{"model_type", "granite"}, {"logits_scaling", 0}}, "\"logits_scaling\""},
  };
  for (const auto& [changes, fragment] : refused) {
    const std::string type = changes["model_type"];
    json j = type == "phi3" ? phi3_json() : type == "smollm3" ? smollm3_json() : granite_json();
    j.update(changes);
    expect_refused(error_of(j), fragment, changes.dump());
  }
}

TEST(HfConfig, EachBridgeSetsItsFields) {
  const model::GptConfig llama3 = parse_hf_config(llama3_json().dump(), kWhere).shape;
  EXPECT_EQ(llama3.rope_scaling.kind, RopeScaling::Kind::llama3);
  EXPECT_EQ(llama3.rope_scaling.factor, 32.0);
  EXPECT_EQ(llama3.rope_scaling.original_max_position, 8192);
  EXPECT_TRUE(llama3.tie_embeddings);
  EXPECT_STREQ(hf_bridge_for(llama3).model_type, "llama");
  // transformers 4's key says the same.
  json older = llama3_json();
  older["rope_scaling"] = older["rope_parameters"];
  older["rope_scaling"].erase("rope_theta");
  older["rope_theta"] = 500000.0;
  older.erase("rope_parameters");
  EXPECT_EQ(parse_hf_config(older.dump(), kWhere).shape, llama3);
  const model::GptConfig qwen3 = parse_hf_config(qwen3_json().dump(), kWhere).shape;
  EXPECT_TRUE(qwen3.qk_norm);
  EXPECT_EQ(qwen3.attention_head_dim(), 24);
  EXPECT_STREQ(hf_bridge_for(qwen3).model_type, "qwen3");
  const model::GptConfig mistral = parse_hf_config(mistral_json().dump(), kWhere).shape;
  EXPECT_EQ(mistral.sliding_window, 8);
  EXPECT_STREQ(hf_bridge_for(mistral).model_type, "mistral");
  json j = mistral_json();
  j["sliding_window"] = nullptr;  // v0.3's: a Llama
  EXPECT_EQ(parse_hf_config(j.dump(), kWhere).shape.sliding_window, 0);
  // What changes the arithmetic and is not built is refused by name.
  const std::pair<json, const char*> refused[] = {
      {json{{"rope_parameters", {{"rope_type", "su"}, {"factor", 4.0}}}}, "\"rope_parameters.rope_type\" is \"su\""},
      {json{{"rope_parameters", {{"rope_type", "llama3"}, {"factor", 4.0}}}}, "\"rope_parameters.low_freq_factor\""},
      {json{{"rope_scaling", {{"type", "linear"}, {"factor", 4.0}}}}, "\"rope_scaling\""},
      {json{{"rope_parameters", {{"rope_type", "linear"}, {"factor", 4.0}, {"beta_fast", 2.0}}}},
       "\"rope_parameters.beta_fast\" is not supported with rope_type linear"},
      {json{{"rope_parameters", {{"rope_type", "longrope"}, {"short_factor", {1.0}}, {"long_factor", {1.0}}}}},
       "short_factor and long_factor need 12 entries"},
      {json{{"partial_rotary_factor", 0.5}}, "\"partial_rotary_factor\" is 0.5"},
      {json{{"attention_bias", true}}, "\"attention_bias\""},
      {json{{"head_dim", 23}}, "\"head_dim\""},
  };
  for (const auto& [changes, fragment] : refused) {
    j = qwen3_json();
    j.update(changes);
    expect_refused(error_of(j), fragment, changes.dump());
  }
  j = qwen3_json();
  j.erase("head_dim");
  expect_refused(error_of(j), "\"head_dim\" is missing", "qwen3 without head_dim");
  j = qwen3_json();
  j["use_sliding_window"] = true;
  expect_refused(error_of(j), "\"use_sliding_window\"", "qwen3 sliding");
  j = llama_json();
  j["model_type"] = "falcon";
  expect_refused(error_of(j), "\"model_type\" is \"falcon\", which is not supported (supported: gpt2, llama, qwen2, "
                              "qwen3, mistral, mixtral, qwen2_moe, gemma2, gemma3_text, olmo2, olmo3, phi3, "
                              "smollm3, granite, ministral3)", "falcon");
}

// transformers 5.23's Ministral3Config: yarn and llama_4_scaling_beta in
// rope_parameters, or the class's own rotation when the file has none.
TEST(HfConfig, Ministral3ScalesItsQueriesByPosition) {
  const json given = json::parse(R"({"architectures": ["Ministral3ForCausalLM"], "model_type": "ministral3",
    "vocab_size": 256, "max_position_embeddings": 32, "hidden_size": 64, "intermediate_size": 176,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "hidden_act": "silu",
    "rms_norm_eps": 1e-05, "sliding_window": null, "tie_word_embeddings": false, "attention_dropout": 0.0,
    "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0,
      "original_max_position_embeddings": 16, "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0,
      "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.5}})");
  const HfModelConfig config = parse_hf_config(given.dump(), kWhere);
  EXPECT_EQ(config.shape.query_position_scale_beta, 0.5);
  EXPECT_EQ(config.shape.rope_scaling.kind, RopeScaling::Kind::yarn);
  EXPECT_EQ(config.shape.rope_scaling.original_max_position, 16);
  EXPECT_STREQ(hf_bridge_for(config.shape).model_type, "ministral3");
  EXPECT_EQ(parse_hf_config(hf_config_json(config.shape, config.keys), kWhere).shape, config.shape);
  json defaulted = given;
  defaulted.erase("rope_parameters");
  const model::GptConfig class_default = parse_hf_config(defaulted.dump(), kWhere).shape;
  EXPECT_EQ(class_default.query_position_scale_beta, 0.1);
  EXPECT_EQ(class_default.rope_scaling.original_max_position, 16384);
  EXPECT_EQ(class_default.rope_theta, 1e6);
  // No other family computes the scale: a Llama-shaped run with it exports as Ministral 3 only.
  model::GptConfig llama_with_scale = parse_hf_config(llama_json().dump(), kWhere).shape;
  llama_with_scale.query_position_scale_beta = 0.5;
  llama_with_scale.rope_scaling = config.shape.rope_scaling;
  EXPECT_STREQ(hf_bridge_for(llama_with_scale).model_type, "ministral3");
}

TEST(HfConfig, WhatExportWritesParsesBack) {
  std::vector<json> all = {gpt2_json(),   llama_json(),   mixtral_json(), qwen2_json(),  qwen2_moe_json(),
                           qwen3_json(),  mistral_json(), llama3_json(),  gemma2_json(), gemma3_json(),
                           olmo2_json(),  phi3_json(),    smollm3_json(), granite_json()};
  for (const json& rope : rope_type_jsons()) all.push_back(rope);
  for (const json& j : all) {
    const HfModelConfig config = parse_hf_config(j.dump(), kWhere);
    const HfModelConfig again = parse_hf_config(hf_config_json(config.shape, config.keys), kWhere);
    EXPECT_EQ(again.shape, config.shape) << config.shape.describe();
    EXPECT_EQ(again.keys, config.keys) << config.shape.describe();
  }
}

// Issue 50: export-hf wrote router_aux_loss_coef 0.001 whatever the run
// used, and a Qwen2-MoE's intermediate_size as its expert width.
TEST(HfConfig, ExportWritesTheAuxCoefficientAndQwen2MoesDenseWidthItWasGiven) {
  const HfModelConfig mixtral = parse_hf_config(mixtral_json().dump(), kWhere);
  EXPECT_EQ(mixtral.keys.router_aux_loss_coef, 0.02);
  EXPECT_FALSE(mixtral.keys.intermediate_size);  // Mixtral's intermediate_size is the expert width
  EXPECT_EQ(json::parse(hf_config_json(mixtral.shape, mixtral.keys))["router_aux_loss_coef"], 0.02);
  json j = qwen2_moe_json();
  j["router_aux_loss_coef"] = 0.05;
  const HfModelConfig qwen = parse_hf_config(j.dump(), kWhere);
  EXPECT_EQ(qwen.keys.router_aux_loss_coef, 0.05);
  EXPECT_EQ(qwen.keys.intermediate_size, 128);
  const json written = json::parse(hf_config_json(qwen.shape, qwen.keys));
  EXPECT_EQ(written["router_aux_loss_coef"], 0.05);
  EXPECT_EQ(written["intermediate_size"], 128);
  EXPECT_EQ(written["moe_intermediate_size"], 96);
  // Nothing said them (a run from a preset without --moe-aux-loss-coef):
  // that run's coefficient, 0, and the expert width for the unused one.
  const json bare = json::parse(hf_config_json(qwen.shape));
  EXPECT_EQ(bare["router_aux_loss_coef"], 0.0);
  EXPECT_EQ(bare["intermediate_size"], 96);
  EXPECT_EQ(json::parse(hf_config_json(mixtral.shape))["router_aux_loss_coef"], 0.0);
  // The coefficient is read without output_router_logits too.
  j.erase("output_router_logits");
  EXPECT_EQ(parse_hf_config(j.dump(), kWhere).keys.router_aux_loss_coef, 0.05);
}

TEST(HfConfig, AWrongTypedValueNestedDeepIsOneLine) {
  // 300,000 levels (a 600 KB file) crashed the host with SIGSEGV.
  for (const char* key : {"vocab_size", "rms_norm_eps", "architectures", "rope_scaling", "model_type"}) {
    std::string text = llama_json().dump();
    text.insert(1, "\"" + std::string(key) + "\": " + nested_arrays(300000) + ", ");
    expect_refused(error_of_text(text), "deeper than 64 levels", key);
  }
  // Within the depth limit a wrong-typed value is named by its size.
  json j = gpt2_json();
  j["vocab_size"] = json::parse(nested_arrays(40));
  expect_refused(error_of(j), "\"vocab_size\" must be an integer, got an array of 1 element(s)", "vocab_size");
  j = llama_json();
  j["rope_scaling"] = json::parse(nested_arrays(40));
  expect_refused(error_of(j), "\"rope_scaling\" is an array of 1 element(s)", "rope_scaling");
}

TEST(HfConfig, AHugeValueIsQuotedBounded) {
  json j = gpt2_json();
  j["activation_function"] = std::string(1 << 20, 'x');
  expect_refused(error_of(j), "(1048576 characters)", "activation_function");
  j = gpt2_json();
  j["architectures"] = json::array({std::string(1 << 20, 'y')});
  expect_refused(error_of(j), "(1048576 characters)", "architectures");
  j = gpt2_json();
  j["model_type"] = std::string(1 << 20, 'z') + "\n";
  expect_refused(error_of(j), "(1048577 characters)", "model_type");
  j = llama_json();
  j["rope_parameters"][std::string(1 << 20, 'k')] = 1;
  expect_refused(error_of(j), "is not supported", "a rope_parameters key");
}

TEST(HfConfig, IntegersAreIntegers) {
  json j = gpt2_json();
  j["vocab_size"] = 256.9;  // ran as 256
  expect_refused(error_of(j), "\"vocab_size\" must be an integer, got 256.9", "256.9");
  j["vocab_size"] = 1e19;  // was "got -9223372036854775808"
  expect_refused(error_of(j), "\"vocab_size\" must be an integer, got 1e+19", "1e19");
  j["vocab_size"] = 18446744073709551615ull;
  expect_refused(error_of(j), "\"vocab_size\" must be at most 4294967296, got 18446744073709551615", "2^64-1");
  j["vocab_size"] = "256";
  expect_refused(error_of(j), "\"vocab_size\" must be an integer, got \"256\"", "a string");
  j = llama_json();
  j["num_key_value_heads"] = 2.0;
  expect_refused(error_of(j), "\"num_key_value_heads\" must be an integer, got 2.0", "2.0");
}

TEST(HfConfig, EpsilonsAndRopeThetaAreFiniteAndPositive) {
  for (const json& bad : {json(0), json(-1.0), json(0.0), json("1e-6"), json(nullptr)}) {
    json j = llama_json();
    j["rms_norm_eps"] = bad;
    if (bad.is_null()) {
      EXPECT_EQ(parse_hf_config(j.dump(), kWhere).shape.norm_eps, 1e-6);  // absent: transformers' default
      continue;
    }
    expect_refused(error_of(j), "\"rms_norm_eps\" must be", bad.dump());
  }
  json j = llama_json();
  j["rope_parameters"]["rope_theta"] = 0;
  expect_refused(error_of(j), "\"rope_parameters.rope_theta\" must be a finite number > 0, got 0", "theta 0");
  j = llama_json();
  j.erase("rope_parameters");
  j["rope_theta"] = -10000.0;
  expect_refused(error_of(j), "\"rope_theta\" must be a finite number > 0", "theta < 0");
  j = gpt2_json();
  j["layer_norm_epsilon"] = 0;
  expect_refused(error_of(j), "\"layer_norm_epsilon\" must be a finite number > 0, got 0", "gpt2 eps 0");
  j["layer_norm_epsilon"] = 1e-6;
  expect_refused(error_of(j), "epsilon 1e-05", "gpt2 eps 1e-6");
  // 1e400 is not JSON a finite double can hold: refused whatever nlohmann makes of it.
  j = gpt2_json();
  j.erase("layer_norm_epsilon");
  std::string text = j.dump();
  text.insert(1, "\"layer_norm_epsilon\": 1e400, ");
  EXPECT_NE(error_of_text(text), "");
}

TEST(HfConfig, EveryDimensionIsRangeChecked) {
  struct Case {
    json document;
    const char* key;
    json value;
    const char* expected;
  };
  const Case cases[] = {
      {gpt2_json(), "n_layer", 0, "\"n_layer\" must be at least 1, got 0"},
      {gpt2_json(), "n_head", -4, "\"n_head\" must be at least 1, got -4"},
      {gpt2_json(), "n_head", 3, "\"n_embd\" (64) must be a multiple of \"n_head\" (3)"},
      {gpt2_json(), "vocab_size", 1, "\"vocab_size\" must be at least 2, got 1"},
      {gpt2_json(), "n_positions", int64_t{1} << 40, "\"n_positions\" must be at most 4294967296"},
      {gpt2_json(), "n_inner", 100, "\"n_inner\" is 100"},
      {gpt2_json(), "n_inner", 256.5, "\"n_inner\" must be an integer, got 256.5"},
      {gpt2_json(), "resid_pdrop", 1.5, "\"resid_pdrop\" must be at most 1, got 1.5"},
      {gpt2_json(), "scale_attn_weights", "yes", "\"scale_attn_weights\" must be true or false, got \"yes\""},
      {gpt2_json(), "tie_word_embeddings", false, "\"tie_word_embeddings\" is false"},
      {llama_json(), "hidden_size", 62, "\"hidden_size\" (62) must be a multiple of \"num_attention_heads\" (4)"},
      {qwen2_json(), "num_attention_heads", 64, "head width"},
      {llama_json(), "num_key_value_heads", 3, "\"num_attention_heads\" (4) must be a multiple of \"num_key_value_heads\" (3)"},
      {llama_json(), "num_key_value_heads", 8, "\"num_key_value_heads\" must be at most 4, got 8"},
      {llama_json(), "num_key_value_heads", 0, "\"num_key_value_heads\" must be at least 1, got 0"},
      {llama_json(), "intermediate_size", 0, "\"intermediate_size\" must be at least 1, got 0"},
      {qwen2_json(), "head_dim", 8, "\"head_dim\" is 8"},
      {llama_json(), "head_dim", 7, "\"head_dim\" = 7 is odd"},
      {llama_json(), "pretraining_tp", 2, "\"pretraining_tp\" is 2"},
      {llama_json(), "attention_dropout", -0.1, "\"attention_dropout\" must be at least 0"},
      {llama_json(), "hidden_act", "gelu", "\"hidden_act\" is \"gelu\""},
      {llama_json(), "rope_parameters", json::array(), "\"rope_parameters\" must be a JSON object, got an array"},
      {llama_json(), "architectures", json::array({"LlamaForCausalLM", 7}), "\"architectures\" holds 7"},
      {llama_json(), "architectures", "LlamaForCausalLM", "\"architectures\" must be an array"},
  };
  for (const Case& c : cases) {
    json j = c.document;
    j[c.key] = c.value;
    expect_refused(error_of(j), c.expected, std::string(c.key) + " = " + c.value.dump());
  }
}

TEST(HfConfig, TheDocumentAndItsModelTypeAreNamed) {
  expect_refused(error_of_text("[1, 2]"), "the document must be a JSON object, got an array of 2 element(s)", "array");
  expect_refused(error_of_text("{"), "not valid JSON", "truncated");
  expect_refused(error_of_text("{}"), "\"model_type\" is missing", "empty");
  expect_refused(error_of(json{{"model_type", "falcon"}}), "\"model_type\" is \"falcon\", which is not supported",
                 "falcon");
  expect_refused(error_of(json{{"model_type", 2}}), "\"model_type\" must be a string, got 2", "number");
  expect_refused(error_of(json{{"model_type", "gpt2"}}), "\"vocab_size\" is missing", "no vocab_size");
}

TEST(HfConfig, AFifoConfigIsRefusedWithoutBlocking) {
  const fs::path dir = fs::temp_directory_path() / ("hf_config_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  ASSERT_EQ(::mkfifo((dir / "config.json").c_str(), 0600), 0);
  auto read = std::async(std::launch::async, [&]() -> std::string {
    try {
      read_hf_config(dir);
    } catch (const CheckpointError& e) {
      return e.what();
    }
    return "";
  });
  ASSERT_EQ(read.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "blocked on the FIFO";
  EXPECT_NE(read.get().find("is a FIFO, not a regular file"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace accel::checkpoint
