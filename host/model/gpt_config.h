// Shapes of the built-in decoder-only models, and their named presets. Two
// families share one GptModel (gpt.h): GPT-2 (LayerNorm, learned positions,
// GELU MLP, tied head) and Llama (RMSNorm, rotary positions, SwiGLU MLP,
// grouped-query attention, untied head; model/llama.cpp). A Llama with
// n_experts > 0 is a mixture of experts, Mixtral's block: every block's
// MLP is n_experts SwiGLU experts of ffn_size and a router (model/moe.h).
// With qkv_bias the attention is Qwen2's (q, k and v biases).
#pragma once

#include <cstdint>
#include <string>

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

  bool has_experts() const { return n_experts > 0; }

  bool operator==(const GptConfig&) const = default;
  std::string describe() const;  // "n_layer=2 n_head=4 ..."
};

const char* to_string(ModelFamily family);  // "gpt2" | "llama"

// gpt-tiny: fast tests; gpt-small: GPT-2 small (124M parameters);
// llama-tiny: fast tests; llama-small: a ~100M Llama (8 layers, 768 wide,
// 12 heads over 4 key/value heads, 32000 tokens); moe-tiny: llama-tiny's
// attention with 4 experts of width 128, top 2; moe-small: llama-small's
// attention with 8 experts of width 1024, top 2 (about 213M parameters,
// 99M of them active per token).
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
