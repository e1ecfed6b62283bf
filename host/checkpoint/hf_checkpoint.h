// Hugging Face `transformers` checkpoints of GPT-2 (GPT2LMHeadModel), the
// rotary decoders (Llama, Qwen2, Qwen3, Mistral: hf_llama.cpp) and
// Mixtral and Qwen2-MoE (MixtralForCausalLM, Qwen2MoeForCausalLM:
// hf_moe.cpp), both ways: reading a
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
// config.json is read by hf_config.h (no LibTorch there).
//
// Errors: CheckpointError, one line naming the file and the key or tensor.
// Thread-safety: free functions without shared state.
#pragma once

#include <ATen/ATen.h>

#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "host/checkpoint/hf_config.h"  // read_hf_config, HfModelConfig
#include "host/checkpoint/hf_weight_source.h"
#include "host/checkpoint/safetensors.h"
#include "host/model/gpt_config.h"
#include "host/model/param_init.h"

namespace accel::checkpoint {

// The same by family: the weights and the host's tensors as transformers
// names them (below, per family; config.json is hf_config.h's). The family
// is hf_bridge_for(shape, keys): keys.model_type where its class computes
// the shape.
std::shared_ptr<const HfWeightSource> read_hf_weights(const std::filesystem::path& dir, const model::GptConfig& shape,
                                                      const HfConfigKeys& keys = {});
std::vector<std::pair<std::string, at::Tensor>> to_hf_tensors(
    const std::vector<std::pair<std::string, at::Tensor>>& host_tensors, const model::GptConfig& shape,
    const HfConfigKeys& keys = {});

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

// The rotary decoders' weights (Llama, Qwen2, Qwen3, Mistral: model.-prefixed
// names, no transposes; an inv_freq buffer is skipped; under tied
// embeddings an lm_head.weight the file holds must equal embed_tokens') and
// tensors. `fused`: Phi-3's naming, q, k and v rows of one
// self_attn.qkv_proj.weight and gate and up rows of one
// mlp.gate_up_proj.weight (split on reading, each rank reading only the
// rows its parameters need; joined on writing).
std::shared_ptr<const HfWeightSource> read_hf_llama_weights(const std::filesystem::path& dir,
                                                            const model::GptConfig& shape, bool fused);
std::vector<std::pair<std::string, at::Tensor>> to_hf_llama_tensors(
    const std::vector<std::pair<std::string, at::Tensor>>& host_tensors, bool fused);

// Mixtral's and Qwen2-MoE's (hf_moe.cpp, by hf_bridge_for): Llama's names for
// everything but the router and the experts. On disk transformers keeps
// Mixtral's router as block_sparse_moe.gate.weight and one tensor per
// expert and projection (block_sparse_moe.experts.{e}.w1 / w3 / w2.weight,
// [F, C], [F, C], [C, F]); Qwen2-MoE's as mlp.gate.weight and
// mlp.experts.{e}.gate_proj / up_proj / down_proj.weight (its shared
// expert under the host's own names). The host stacks them as its
// mlp.experts.gate_up_proj [E, 2F, C] (gate then up per expert) and
// mlp.experts.down_proj [E, C, F], as transformers 5 does in memory.
std::shared_ptr<const HfWeightSource> read_hf_moe_weights(const std::filesystem::path& dir,
                                                          const model::GptConfig& shape);
std::vector<std::pair<std::string, at::Tensor>> to_hf_moe_tensors(
    const std::vector<std::pair<std::string, at::Tensor>>& host_tensors, const model::GptConfig& shape);

}  // namespace accel::checkpoint
