// One Hugging Face `model_type` onto the host's one decoder (model/gpt_config.h),
// the way Megatron-Bridge adds a family in one file: what config.json's keys
// make of GptConfig's fields, how the weights are named on disk, and which
// transformers class export-hf writes. Every bridge is one file under
// checkpoint/bridges/ and one line of the table (hf_bridge.cpp); nothing
// else — the model, the strategies, the plugins — knows architectures.
//
// A bridge's reader takes every key that changes the arithmetic: it honours
// it (a field of the shape) or refuses it by name in one line
// (CheckpointError through the caller); keys that cannot change training
// (token ids, use_cache, dtype) are left alone, as transformers leaves them.
// Free of LibTorch (the fuzz target links it). Thread-safety: the table is
// immutable after its first use.
#pragma once

#include <accel/sdk/json_input.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "host/checkpoint/hf_config.h"

namespace accel::checkpoint {

// How a family names its tensors on disk (hf_checkpoint.h maps each kind).
enum class HfWeightNames {
  gpt2,     // "transformer."-prefixed, Conv1D projections ([in, out])
  llama,    // the host's names with "model." (lm_head.weight as is), all [out, in]
  mixtral,  // llama's, the experts one tensor each under block_sparse_moe.experts.{e}.w1/w3/w2
  qwen2_moe,  // llama's, the experts under mlp.experts.{e}.gate_proj/up_proj/down_proj
  phi3,     // llama's, q/k/v one self_attn.qkv_proj and gate/up one mlp.gate_up_proj (rows stacked)
};

struct HfBridge {
  const char* model_type;    // config.json's "model_type"
  const char* architecture;  // the transformers class ("LlamaForCausalLM"), written by export-hf
  const char* display_name;  // in messages ("Llama")
  HfWeightNames weights;
  // config.json's keys -> the host's shape (and what is ignored, noted).
  HfModelConfig (*read)(const sdk::JsonFields& config);
  // Whether export-hf writes `shape` as this family: true only when the
  // family's class computes exactly what the shape does.
  bool (*writes)(const model::GptConfig& shape);
  // config.json for a shape this bridge writes, with the keys beyond the
  // shape a run carries (HfConfigKeys; the dense families have none).
  std::string (*config_json)(const model::GptConfig& shape, const HfConfigKeys& keys);
};

// Every bridge, in the order export-hf asks them (the first that writes a
// shape wins).
const std::vector<HfBridge>& hf_bridges();
// The bridge of config.json's model_type; nullptr when none.
const HfBridge* find_hf_bridge(std::string_view model_type);
// The bridge export-hf writes `shape` with; CheckpointError naming the shape
// when no transformers class computes it.
const HfBridge& hf_bridge_for(const model::GptConfig& shape);
// The bridge of keys.model_type when it writes `shape`, else hf_bridge_for(shape).
const HfBridge& hf_bridge_for(const model::GptConfig& shape, const HfConfigKeys& keys);
// "gpt2, llama, ..." for messages.
std::string supported_model_types();

}  // namespace accel::checkpoint
