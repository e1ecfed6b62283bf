// Hugging Face `transformers` checkpoints of GPT-2 (GPT2LMHeadModel) and
// Llama (LlamaForCausalLM, hf_llama.cpp), both ways: reading a
// save_pretrained directory for --init-from hf:DIR, and the names, layouts
// and config.json that export-hf writes.
//
// Llama's mapping is a prefix: the host names its parameters as
// transformers does without "model." (lm_head.weight as is), all [out, in].
// GPT-2's mapping is GPT-2's own: the host already names its parameters as
// GPT-2 does (h.{i}.attn.c_attn.weight, ...); transformers prefixes them with
// "transformer." and stores the four block projections as Conv1D weights,
// [in, out], where the host keeps torch.nn.Linear's [out, in]. The head is
// tied to wte, so lm_head.weight is never stored by the host (a file that
// holds one must hold wte's values). Everything in config.json that the
// host's GPT-2 cannot be (another architecture, activation, epsilon, MLP
// width, attention scaling, untied head) is refused by name: a model that
// loads here computes what transformers computes.
//
// Errors: CheckpointError, one line naming the file and the key or tensor.
// Thread-safety: free functions without shared state.
#pragma once

#include <ATen/ATen.h>
#include <nlohmann/json_fwd.hpp>

#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "host/checkpoint/hf_weight_source.h"
#include "host/checkpoint/safetensors.h"
#include "host/model/gpt_config.h"
#include "host/model/param_init.h"

namespace accel::checkpoint {

// What config.json says the model is, and what the host cannot honour but
// may ignore with a warning (dropout rates: the host trains without
// dropout), one line each.
struct HfModelConfig {
  model::GptConfig shape;  // n_positions becomes seq_len
  std::vector<std::string> ignored;
};

// Reads DIR/config.json of a GPT2LMHeadModel or a LlamaForCausalLM (by its
// model_type; another is refused naming it).
HfModelConfig read_hf_config(const std::filesystem::path& dir);

// The same by family: the weights, the host's tensors as transformers names
// them, and config.json (below, per family).
std::shared_ptr<const HfWeightSource> read_hf_weights(const std::filesystem::path& dir, const model::GptConfig& shape);
std::vector<std::pair<std::string, at::Tensor>> to_hf_tensors(
    const std::vector<std::pair<std::string, at::Tensor>>& host_tensors, const model::GptConfig& shape);
std::string hf_config_json(const model::GptConfig& shape);

// The config.json (at `path`, parsed) of each family.
HfModelConfig read_hf_gpt2_config(const std::filesystem::path& path, const nlohmann::json& config);
HfModelConfig read_hf_llama_config(const std::filesystem::path& path, const nlohmann::json& config);

// The weights of DIR (model.safetensors, or the shards that
// model.safetensors.index.json lists) under the host's names and layouts,
// each checked against `shape` now and read (as fp32, block by block, only
// what a rank asks for) later: hf_weight_source.h. A missing weight, one of
// another shape or a non-floating dtype, an untied lm_head and a tensor the
// model does not have are refused by name; the causal-mask buffers older
// files hold are skipped.
std::shared_ptr<const HfWeightSource> read_hf_gpt2_weights(const std::filesystem::path& dir,
                                                           const model::GptConfig& shape);

// The host's whole tensors (merge-weights' names) as transformers stores
// them: "transformer."-prefixed, projections transposed to Conv1D, in the
// same order. Throws CheckpointError for a name GPT-2 does not have.
std::vector<std::pair<std::string, at::Tensor>> to_hf_gpt2_tensors(
    const std::vector<std::pair<std::string, at::Tensor>>& host_tensors);

// config.json for `shape`, the way GPT2Config.to_json_string lays out the
// keys the host sets (dropout 0: the host trained without it).
std::string hf_gpt2_config_json(const model::GptConfig& shape);

// Llama's weights (model.-prefixed names, no transposes; an inv_freq buffer
// is skipped), tensors and config.json (transformers 5's rope_parameters).
std::shared_ptr<const HfWeightSource> read_hf_llama_weights(const std::filesystem::path& dir,
                                                            const model::GptConfig& shape);
std::vector<std::pair<std::string, at::Tensor>> to_hf_llama_tensors(
    const std::vector<std::pair<std::string, at::Tensor>>& host_tensors);
std::string hf_llama_config_json(const model::GptConfig& shape);

}  // namespace accel::checkpoint
