// Shapes of the built-in decoder-only models, and their named presets: the
// one description GptModel (gpt.h) builds from. `family` picks the block's
// base: GPT-2's (LayerNorm, learned positions, GELU MLP, tied head) or the
// rotary decoder's (RMSNorm, rotary positions, SwiGLU MLP, grouped-query
// attention; model/llama.cpp). Every other choice of that block is a field
// with a default that is Llama's, the way Megatron-Core's TransformerConfig
// describes one block for many architectures: q/k/v biases (Qwen2), the
// head width (Qwen3's is not n_embd / n_head), per-head q/k RMSNorm (Qwen3),
// a tied head (Llama 3.2, Qwen2.5), a sliding attention window (Mistral),
// the rotary scaling (Llama 3.1), Gemma's and OLMo 2's norm placement,
// 1 + w norms, GeGLU, scales, soft-caps and per-layer windows (`block`,
// cli/block_choices.h), and n_experts > 0 for a mixture of
// experts (Mixtral's block: every block's MLP is n_experts SwiGLU experts of
// ffn_size and a router, model/moe.h). Which Hugging Face model_type a
// shape is lives outside the model (checkpoint/hf_bridge.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "host/cli/run_config.h"

namespace accel::model {

enum class ModelFamily { gpt2, llama };

struct GptConfig {
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t n_embd = 64;
  int64_t seq_len = 64;
  int64_t vocab_size = 256;
  ModelFamily family = ModelFamily::gpt2;
  // Llama only (0 for GPT-2): key/value heads (grouped-query attention;
  // n_head is a multiple) and the SwiGLU MLP's hidden width.
  int64_t n_kv_head = 0;
  int64_t ffn_size = 0;
  double rope_theta = 10000.0;  // Llama: rotary base
  double norm_eps = 1e-5;       // LayerNorm (GPT-2) or RMSNorm (Llama) epsilon
  // Llama only: experts per block (0: the dense SwiGLU MLP) and the experts
  // each token takes (top k, 1 <= k <= n_experts; 0 without experts).
  int64_t n_experts = 0;
  int64_t experts_per_token = 0;
  // With experts: Qwen2-MoE's shared expert (a SwiGLU of this width every
  // token goes through, scaled by a sigmoid gate; 0: none), and whether the
  // k routing weights are renormalised to sum 1 (Mixtral) or kept as the
  // softmax gave them (Qwen2-MoE's default norm_topk_prob false).
  int64_t shared_expert_size = 0;
  bool normalize_top_k = true;
  // Llama only: the q, k and v projections carry biases (Qwen2's and
  // Qwen2-MoE's attention; o has none).
  bool qkv_bias = false;
  // Llama only: the width of one attention head (0: n_embd / n_head); q and
  // o are n_head * head_dim wide, k and v n_kv_head * head_dim.
  int64_t head_dim = 0;
  // Llama only: the head projects with embed_tokens.weight (no lm_head).
  bool tie_embeddings = false;
  // Llama only: Qwen3's RMSNorm over each head of q and of k (weights
  // [head_dim], shared by the heads), before the rotation.
  bool qk_norm = false;
  // Llama only: query i attends to keys i - sliding_window + 1 .. i
  // (Mistral's; 0: the whole causal prefix).
  int64_t sliding_window = 0;
  RopeScaling rope_scaling{};  // Llama only (run_config.h)
  // Llama only: norm placement, 1 + w norms, whole-projection q/k norms,
  // GeGLU, embedding scale, softmax scale, soft-capping, per-layer windows
  // and rotary bases (Gemma 2/3, OLMo 2; cli/block_choices.h).
  BlockChoices block{};
  // Llama only: the fraction of each head's features that rotate, the first
  // int(head_dim * partial_rotary_factor) of them (Phi-3/4's; 1: all).
  double partial_rotary_factor = 1.0;
  // Llama only: the layers (0-based, ascending) whose attention turns
  // nothing (SmolLM3's no_rope_layers zeros; empty: every layer rotates).
  std::vector<int64_t> nope_layers;
  // Llama only, Granite's scalars: the embedding output multiplied by
  // embedding_multiplier, each sub-layer's output by residual_multiplier
  // before it joins the residual, the logits divided by logits_scaling, and
  // the softmax scale attention_multiplier (0: 1 / sqrt(head_dim)).
  double embedding_multiplier = 1.0, residual_multiplier = 1.0, logits_scaling = 1.0;
  double attention_multiplier = 0.0;
  // Llama only, Ministral 3's (transformers' llama_4_scaling_beta): after the
  // rotation each query is multiplied by 1 + beta * log(1 + floor(position /
  // rope_scaling.original_max_position)) (0: none).
  double query_position_scale_beta = 0.0;

  bool has_experts() const { return n_experts > 0; }
  // The width of one attention head, given or implied.
  int64_t attention_head_dim() const { return head_dim > 0 ? head_dim : n_embd / n_head; }
  // The rotated features of a head: int(head_dim * partial_rotary_factor), as transformers truncates it.
  bool rotates_layer(int64_t layer) const {
    return !std::binary_search(nope_layers.begin(), nope_layers.end(), layer);
  }
  int64_t rotary_dim() const {
    return static_cast<int64_t>(static_cast<double>(attention_head_dim()) * partial_rotary_factor);
  }
  // GPT-2's head is always tied to wte.
  bool head_tied() const { return family == ModelFamily::gpt2 || tie_embeddings; }

  bool operator==(const GptConfig&) const = default;
  std::string describe() const;  // "n_layer=2 n_head=4 ..."
};

const char* to_string(ModelFamily family);  // "gpt2" | "llama"

// gpt-tiny: fast tests; gpt-small: GPT-2 small (124M parameters);
// llama-tiny: fast tests; llama-small: a ~100M Llama (8 layers, 768 wide,
// 12 heads over 4 key/value heads, 32000 tokens); moe-tiny: llama-tiny's
// attention with 4 experts of width 128, top 2; moe-small: llama-small's
// attention with 8 experts of width 1024, top 2 (about 213M parameters,
// 99M of them active per token); llama3-tiny, qwen2-tiny, qwen3-tiny,
// mistral-tiny, gemma2-tiny, gemma3-tiny, olmo2-tiny, phi3-tiny,
// smollm3-tiny and granite-tiny: llama-tiny with
// each family's choices (gpt_config.cpp).
// Throws std::invalid_argument for an unknown preset or inconsistent shapes.
GptConfig make_gpt_config(const std::string& preset, const ModelOverrides& overrides);

// Parameter count, the tied head counted once.
int64_t count_parameters(const GptConfig& config);

// A lower bound of the bytes one rank needs to train `config` with
// `micro_batch` sequences per micro-step: `bytes_per_parameter` for each
// parameter (the caller's share: 16 for a full fp32 replica with gradients
// and AdamW moments, 4 / ranks when a plugin shards the parameters) plus one
// micro-batch's fp32 logits. Computed in double, so shapes whose products
// overflow int64 still compare; the refusal of a shape that cannot possibly
// fit (host/app/run.cpp) rests on it.
double minimum_training_bytes(const GptConfig& config, int64_t micro_batch, double bytes_per_parameter);

}  // namespace accel::model
