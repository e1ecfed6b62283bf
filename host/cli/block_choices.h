// The rotary decoder block's choices beyond Llama's that Gemma 2, Gemma 3
// and OLMo 2 need (model/llama.cpp computes them; model/gpt_config.h holds
// them as GptConfig::block). Every default is Llama's, so a shape without
// them (every preset before these families) compares, prints and saves as
// before. Plain data, no LibTorch: the config.json bridges and
// trainer_state.json read and write it.
#pragma once

#include <cstdint>
#include <vector>

namespace accel {

struct BlockChoices {
  // Where the RMSNorms sit around a block's two sub-layers:
  //   pre       x + attn(n1(x)), then h + mlp(n2(h))               (Llama)
  //   sandwich  x + n2(attn(n1(x))), then h + n4(mlp(n3(h)))         (Gemma 2/3)
  //   post      x + n2(attn(x)), then h + n4(mlp(h))                 (OLMo 2)
  // named input_layernorm (n1), post_attention_layernorm (n2, Llama's
  // pre-MLP norm), pre_feedforward_layernorm (n3), post_feedforward_layernorm
  // (n4), as transformers names them.
  enum class NormPlacement { pre, sandwich, post };
  NormPlacement norm_placement = NormPlacement::pre;
  // Gemma: every RMSNorm scales by 1 + w (its weights start at zero),
  // computed in fp32 and then cast, as Gemma2RMSNorm does.
  bool norm_plus_one = false;
  // OLMo 2: q_norm and k_norm over the whole projection (weights
  // [n_head * head_dim] and [n_kv_head * head_dim]) rather than per head
  // (GptConfig::qk_norm, Qwen3's and Gemma 3's).
  bool qk_norm_whole = false;
  // The gated MLP's activation: silu (SwiGLU) or the tanh GELU (Gemma's
  // gelu_pytorch_tanh: GeGLU).
  enum class MlpActivation { silu, gelu_tanh };
  MlpActivation mlp_activation = MlpActivation::silu;
  // Gemma: the token embeddings times sqrt(n_embd), the factor rounded to
  // the activations' dtype first.
  bool scale_embeddings = false;
  // Gemma: the softmax scale query_pre_attn_scalar^-1/2 (0: head_dim^-1/2).
  double query_pre_attn_scalar = 0.0;
  // Gemma 2: attention logits capped as tanh(s / cap) * cap before the mask,
  // and the output logits likewise (0: no cap).
  double attn_logit_softcap = 0.0;
  double final_logit_softcap = 0.0;
  // transformers' layer_types: per layer, whether it attends through
  // GptConfig::sliding_window (true) or over the whole prefix (false).
  // Empty: every layer uses the window (Mistral's, or none without one).
  std::vector<bool> sliding_layers;
  // Gemma 3: the rotary base of sliding layers (rope_local_base_freq);
  // full layers keep rope_theta and rope_scaling. 0: one base for all.
  double rope_local_theta = 0.0;

  bool operator==(const BlockChoices&) const = default;
  bool is_default() const { return *this == BlockChoices{}; }
  // Whether layer `layer` attends through the sliding window (when one is set).
  bool sliding_layer(int64_t layer) const {
    return sliding_layers.empty() || sliding_layers.at(static_cast<size_t>(layer));
  }
};

const char* to_string(BlockChoices::NormPlacement placement);  // "pre" | "sandwich" | "post"
const char* to_string(BlockChoices::MlpActivation activation);  // "silu" | "gelu_tanh"

}  // namespace accel
