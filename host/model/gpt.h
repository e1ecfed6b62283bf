// The built-in model: GPT-2's architecture (learned positions, pre-LayerNorm
// blocks, causal multi-head attention, tanh-GELU MLP of 4x width, final
// LayerNorm, head tied to the token embedding), as an ordered list of units
// (and, once its parameters are split, tensor-parallel as Megatron-LM runs it):
//   [embedding (wte, wpe), block.0 .. block.{n-1}, head (ln_f; uses wte)].
//
// Parameter names follow GPT-2's (h.{i}.attn.c_attn.weight, ...) with
// torch.nn.Linear's [out, in] layout, so a checkpoint loads into a torch.nn
// reference directly. Not thread-safe.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "host/model/context_parallel.h"
#include "host/model/cross_entropy.h"
#include "host/model/fused_ops.h"
#include "host/model/gpt_config.h"
#include "host/model/moe.h"
#include "host/model/tensor_parallel.h"
#include "host/model/unit.h"

namespace accel::model {

class GptModel {
 public:
  // With `allocate` false no unit has storage yet: the trainer materialises
  // the units it keeps after the plugins planned (unit.h), so a unit a
  // sharding plugin takes over is never allocated whole by the host.
  explicit GptModel(const GptConfig& config, at::Device device = at::kCPU, bool allocate = true);

  const GptConfig& config() const { return config_; }
  // GPT-2's head projects with the token embedding (unit 0's wte.weight),
  // and so does a Llama with tie_embeddings (embed_tokens.weight); an
  // untied Llama's head holds its own lm_head.weight.
  bool head_tied_to_embedding() const { return config_.head_tied(); }
  // The embedding unit's token table (the tied head's weight).
  const char* token_embedding_name() const {
    return config_.family == ModelFamily::gpt2 ? "wte.weight" : "embed_tokens.weight";
  }
  at::Device device() const { return units_.front().device(); }
  std::vector<Unit>& units() { return units_; }
  const std::vector<Unit>& units() const { return units_; }
  int64_t num_parameters() const;

  // Fills the parameters of every unit that has them from `seed` (or from
  // the initial weights, when set), and remembers the source for units
  // materialised later (param_init()).
  void initialise(uint64_t seed);
  uint64_t init_seed() const { return param_init_.seed(); }
  const ParamInit& param_init() const { return param_init_; }

  // --init-from: every parameter starts from `weights` instead of the seed
  // streams. Call before initialise(). Throws std::invalid_argument naming
  // the first parameter that is missing or of another shape, and the first
  // name that is not a parameter of this model. The NamedWeights form also
  // refuses a tensor that is not contiguous fp32 on the CPU.
  void set_initial_weights(std::shared_ptr<const WeightSource> weights);
  void set_initial_weights(std::shared_ptr<const NamedWeights> weights);
  // After start-up, when every unit (and every plugin's shard) has taken
  // its values: frees the loaded copy or closes the files (param_init.h).
  void release_initial_weights() { param_init_.release_weights(); }
  void zero_grads();

  // Runs unit `index` on its input: token ids [B, T] (int64) for the
  // embedding, hidden states for blocks; the head returns logits. Hidden
  // states and logits are sequence-major, [T, B, C] and [T, B, V]
  // (accel/model.h's activation layout; Megatron's): under sequence
  // parallelism a unit's input and output are this rank's [T/tp, B, C]
  // slice. Composable over any unit range (pipeline stages).
  at::Tensor forward_unit(size_t index, const at::Tensor& input) const;
  at::Tensor forward(const at::Tensor& tokens) const;  // all units: logits

  // Incremental decoding (generation): the keys and values every block
  // computed for the positions so far, [B, heads, length, head_dim] each.
  struct KvCache {
    std::vector<at::Tensor> keys, values;  // one per block; undefined until the first call
    int64_t length = 0;                    // positions cached
  };
  // Logits [T, B, V] of `tokens` [B, T] at positions cache.length ..
  // cache.length + T - 1, attending to the cached positions as well; appends
  // their keys and values to `cache`. The same logits as forward() on the
  // whole sequence. One process (no tensor group, no linear chain); throws
  // std::invalid_argument when the positions would pass seq_len.
  at::Tensor forward_cached(const at::Tensor& tokens, KvCache& cache) const;

  // Mean cross-entropy of next-token prediction over all B*T positions
  // (targets [B, T], as the tokens).
  at::Tensor loss(const at::Tensor& tokens, const at::Tensor& targets) const;
  // The same from the head's output (vocab-parallel under tensor parallelism).
  at::Tensor loss_from_logits(const at::Tensor& logits, const at::Tensor& targets) const;
  // The loss and its gradient at the logits, d(multiplier * loss) / d logits,
  // without autograd's three logit-sized float buffers (cross_entropy.h),
  // or in one kernel where the fused kernels serve (fused_ops.h): CUDA
  // logits outside tensor parallelism (and any under FusedKernels::always);
  // std::nullopt elsewhere, where the caller takes autograd's gradient of
  // loss_from_logits (whose bits the CPU parity tests pin).
  std::optional<LossAndGrad> loss_and_logit_grad(const at::Tensor& logits, const at::Tensor& targets,
                                                 double multiplier) const;

  // Runs the model tensor-parallel over `group` (Megatron's layout, see
  // tensor_parallel.h): the units' parameters must already be split to
  // match (Unit::split_params: c_attn / c_fc by output rows, c_proj by input
  // columns, wte by vocabulary rows). `group` must outlive the model's use.
  void set_tensor_group(TensorGroup group) { tensor_group_ = std::move(group); }
  const TensorGroup& tensor_group() const { return tensor_group_; }

  // Splits every sequence over `group` (context_parallel.h): embed() and
  // the losses take the whole [B, T] tokens and targets and keep this
  // rank's positions; attention spans the whole sequence. Composes with
  // the tensor group (heads split first, then the context exchange).
  // `group` must outlive the model's use.
  void set_context_group(ContextGroup group) { context_group_ = std::move(group); }
  const ContextGroup& context_group() const { return context_group_; }
  // Expert parallelism (expert_parallel.h): the units' ACCEL_PARAM_EXPERTS
  // parameters must already hold this rank's E / size experts.
  void set_expert_group(ExpertGroup group) { expert_group_ = std::move(group); }
  const ExpertGroup& expert_group() const { return expert_group_; }

  // Routes the blocks' linear layers (y = x W^T + b) through `linear`, given
  // the unit index and the weight's index within the unit: how plugins'
  // linear chains (tensor parallel, FP8) reach them. Empty: at::linear.
  using LinearFn = std::function<at::Tensor(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                            int32_t unit, int32_t param)>;
  void set_linear(LinearFn linear) { linear_ = std::move(linear); }

  // Where the blocks, the head and the loss take the fused kernels
  // (fused_ops.h): `automatic` on a CUDA device in a build that has them
  // (--fused-kernels true, the default), `off` never (ATen's composition
  // everywhere, for comparison), `always` also on the CPU through the
  // kernels' references (for the tests of this wiring: slow).
  enum class FusedKernels { off, automatic, always };
  void set_fused_kernels(FusedKernels mode) { fused_kernels_ = mode; }

  // A mixture of experts (GptConfig::has_experts): the routers' capacity
  // factor, and the auxiliary losses' coefficients. With either coefficient
  // above 0 every block keeps its router logits for the trainer, which adds
  // moe_auxiliary_loss over them to the loss (and their gradient to the
  // blocks' backward); otherwise the blocks keep none.
  void set_moe_training(const MoeTraining& training) { moe_training_ = training; }
  const MoeTraining& moe_training() const { return moe_training_; }
  bool moe_losses_on() const {
    return config_.has_experts() && (moe_training_.aux_loss_coef > 0.0 || moe_training_.z_loss_coef > 0.0);
  }
  // What unit `unit`'s router did in its latest forward: assignments per
  // expert and those dropped (empty for a unit without experts).
  const MoeRouting& latest_routing(size_t unit) const;
  // Moves out the router logits unit `unit`'s latest forward kept
  // (undefined when none were kept): the caller owns them, and with them
  // the router's part of that forward's graph.
  at::Tensor take_router_logits(size_t unit) const;
  // aux_loss_coef x load_balancing_loss + z_loss_coef x router_z_loss over
  // one forward's router logits, every MoE layer's (moe.h's formulas).
  at::Tensor moe_auxiliary_loss(const std::vector<at::Tensor>& router_logits) const;

 private:
  // `offset`: the position of the first token (forward_cached).
  at::Tensor embed(const Unit& unit, const at::Tensor& tokens, int64_t offset = 0) const;
  at::Tensor embed_context_part(const Unit& unit, const at::Tensor& tokens) const;
  // With `cache`, block `layer` attends to the cached keys and values too
  // and appends its own.
  at::Tensor block(const Unit& unit, const at::Tensor& x, KvCache* cache = nullptr, size_t layer = 0) const;
  at::Tensor head(const Unit& unit, const at::Tensor& x) const;

  // The llama family (model/llama.cpp): its units, and its blocks' and
  // head's forward. `offset` is the position of the block input's first
  // token (the rotary angle), non-zero only in forward_cached.
  void add_llama_units(at::Device device, bool allocate);
  at::Tensor llama_block(const Unit& unit, const at::Tensor& x, KvCache* cache, size_t layer, int64_t offset) const;
  at::Tensor llama_head(const Unit& unit, const at::Tensor& x) const;
  // A mixture of experts' MLP on a block's normed [T, B, C] input.
  at::Tensor llama_experts(const Unit& unit, const at::Tensor& x) const;
  struct LlamaLayout {
    static constexpr size_t kNone = static_cast<size_t>(-1);
    size_t attn_norm, q, k, v, o, mlp_norm;
    size_t q_bias = kNone, k_bias = kNone, v_bias = kNone;                // Qwen2's attention biases
    size_t q_norm = kNone, k_norm = kNone;                               // Qwen3's per-head norms (OLMo 2's whole)
    size_t pre_ffn_norm = kNone, post_ffn_norm = kNone;                  // Gemma's sandwich, OLMo 2's post-norms
    size_t gate = kNone, up = kNone, down = kNone;                       // the dense MLP
    size_t router = kNone, experts_gate_up = kNone, experts_down = kNone;  // or the experts
    size_t shared_gate = kNone, shared_up = kNone, shared_down = kNone, shared_expert_gate = kNone;  // and theirs
    static LlamaLayout resolve(const Unit& block, const GptConfig& config);
  };
  LlamaLayout llama_layout_{};

  // Positions of each block parameter within a block unit's params().
  struct BlockLayout {
    size_t ln_1_weight, ln_1_bias, attn_weight, attn_bias, attn_proj_weight, attn_proj_bias;
    size_t ln_2_weight, ln_2_bias, fc_weight, fc_bias, mlp_proj_weight, mlp_proj_bias;
    static BlockLayout resolve(const Unit& block);
  };

  GptConfig config_;
  ParamInit param_init_;
  std::shared_ptr<const WeightSource> initial_weights_;
  std::vector<Unit> units_;
  BlockLayout block_layout_{};
  // Attention over this rank's heads: causal SDPA, or across the context
  // group; with a cache (decoding) the cache's mask.
  // `scale`: the softmax scale when not 1/sqrt(head_dim) (Gemma's).
  at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const std::optional<at::Tensor>& mask, bool causal,
                       std::optional<double> scale = std::nullopt) const;
  // Targets [B, T] at this rank's positions (all of them without context parallelism).
  at::Tensor local_targets(const at::Tensor& targets) const;

  // Whether tensors like `t` take the fused kernels (set_fused_kernels).
  bool fused_for(const at::Tensor& t) const;
  // residual + delta (delta undefined: the residual alone), then the
  // family's norm (GPT-2's LayerNorm with bias, Llama's RMSNorm): one fused
  // kernel where fused_for says so, ATen's composition otherwise. `sum` is
  // the residual itself when there is no delta.
  fused::AddNorm add_norm(const at::Tensor& residual, const at::Tensor& delta, const at::Tensor& weight,
                          const at::Tensor& bias = at::Tensor()) const;
  // The dtype the fused norm rounds its output to: autocast's, which the
  // next linear would cast it to, unless a plugin's linear or a tensor
  // region (whose gradient is all-reduced in fp32) takes it first; else
  // the type ATen's norm would give.
  at::ScalarType normed_type(const at::Tensor& residual, const at::Tensor& weight) const;
  // Q or K ([T, B, heads * D], as the linear gives them) rotated at each
  // position, as [B, heads, T, D].
  at::Tensor rotated_heads(const at::Tensor& projected, int64_t heads, const at::Tensor& cos32,
                           const at::Tensor& sin32) const;

  LinearFn linear_;
  FusedKernels fused_kernels_ = FusedKernels::automatic;
  MoeTraining moe_training_;
  mutable std::vector<MoeRouting> routing_;  // per unit: its latest forward's (model is single-threaded)
  TensorGroup tensor_group_;
  ContextGroup context_group_;
  ExpertGroup expert_group_;
};

}  // namespace accel::model
