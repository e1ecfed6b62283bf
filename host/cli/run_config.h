// Everything one run of accel-host is configured with, as parsed from the
// command line and --config file. Plain data: validated by cli/options.cpp,
// read by the trainer; nothing here knows about Boost or LibTorch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "host/cli/block_choices.h"

namespace accel {

// Rotary frequency scaling (transformers' rope_type, computed as its
// ROPE_INIT_FUNCTIONS do: model/rotary.h): none (the default embedding);
// Llama 3.1's (llama3: wavelengths beyond original_max_position /
// low_freq_factor divided by factor, those under original_max_position /
// high_freq_factor kept, the band between blended); linear (every
// frequency divided by factor); dynamic (NTK: the base grows with the
// sequence beyond original_max_position, here max_position_embeddings);
// yarn (interpolation blended into extrapolation between beta_fast and
// beta_slow rotations, cos and sin scaled by attention_factor, given or
// from mscale); longrope (Phi-3: per-frequency short_factor up to
// original_max_position positions, long_factor beyond, cos and sin scaled
// by attention_factor, given or from factor).
struct RopeScaling {
  enum class Kind { none, llama3, linear, dynamic, yarn, longrope };
  Kind kind = Kind::none;
  double factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 1.0;
  int64_t original_max_position = 0;
  // yarn and longrope: the cos/sin scale as config.json gave it (unset:
  // derived from factor, mscale and mscale_all_dim as transformers does).
  std::optional<double> attention_factor;
  // yarn only (transformers' defaults; mscale 0: unset).
  double beta_fast = 32.0, beta_slow = 1.0, mscale = 0.0, mscale_all_dim = 0.0;
  bool truncate = true;
  // longrope only: one factor per rotary frequency.
  std::vector<double> short_factor, long_factor;
  bool operator==(const RopeScaling&) const = default;
};

// transformers' rope_type of `kind`: "default", "llama3", "linear", ...
inline const char* to_string(RopeScaling::Kind kind) {
  constexpr const char* kNames[] = {"default", "llama3", "linear", "dynamic", "yarn", "longrope"};
  return kNames[static_cast<int>(kind)];
}

struct ModelOverrides {
  std::optional<int64_t> n_layer, n_head, n_embd, seq_len, vocab_size;
  std::optional<int64_t> n_kv_head, ffn_size;  // llama family only
  std::optional<double> rope_theta, norm_eps;  // llama family only (from --init-from's config.json)
  std::optional<int64_t> n_experts, experts_per_token;  // llama family only: a mixture of experts
  std::optional<int64_t> shared_expert_size;  // moe: Qwen2-MoE's shared expert (0: none)
  std::optional<bool> normalize_top_k;        // moe: Mixtral renormalises the top k (Qwen2-MoE's norm_topk_prob)
  std::optional<bool> qkv_bias;               // llama family only: Qwen2's q, k and v biases
  // llama family only, from --init-from's config.json (model/gpt_config.h):
  std::optional<int64_t> head_dim;            // attention head width (Qwen3: not n_embd / n_head)
  std::optional<bool> tie_embeddings;         // the head projects with embed_tokens (Llama 3.2, Qwen2.5)
  std::optional<bool> qk_norm;                // Qwen3's per-head RMSNorm of q and k
  std::optional<int64_t> sliding_window;      // Mistral's: each query sees this many keys (0: all)
  std::optional<RopeScaling> rope_scaling;
  std::optional<BlockChoices> block;         // Gemma's and OLMo 2's choices (block_choices.h)
  std::optional<double> partial_rotary_factor;  // Phi-3/4's: the fraction of each head that rotates
  std::optional<std::vector<int64_t>> nope_layers;  // SmolLM3's layers without rotary
  // Granite's multipliers (model/gpt_config.h).
  std::optional<double> embedding_multiplier, residual_multiplier, logits_scaling, attention_multiplier;
  std::optional<double> query_position_scale_beta;  // Ministral 3's (model/gpt_config.h)
};

// How a mixture-of-experts model trains (model/moe.h): capacity and the
// router's auxiliary losses. All off by default, as transformers trains
// MixtralForCausalLM unless output_router_logits is set.
struct MoeTraining {
  double capacity_factor = 0.0;  // 0: dropless
  double aux_loss_coef = 0.0;    // load balancing (transformers' router_aux_loss_coef)
  double z_loss_coef = 0.0;      // ST-MoE's router z-loss
};

// Keys of a transformers config.json that no model shape holds but that
// export-hf writes as the run had them: taken from --init-from's file,
// carried through every checkpoint (trainer_state.json's "hf_config") and
// written back (checkpoint/hf_config.h). Unset: nothing said them.
struct HfConfigKeys {
  // Mixtral and Qwen2-MoE: the load-balancing loss's weight. A run with
  // --moe-aux-loss-coef > 0 sets it to that; one without keeps its source's.
  std::optional<double> router_aux_loss_coef;
  // Qwen2-MoE: the dense MLP width of mlp_only_layers (none here, so no
  // layer uses it), which the expert width must not replace.
  std::optional<int64_t> intermediate_size;
  // The model_type to export as when its class computes the shape, though
  // an earlier bridge would too (Phi-3: a Llama's arithmetic, its own fused
  // weight names and generation); unset: the first bridge that writes it.
  std::optional<std::string> model_type;

  bool operator==(const HfConfigKeys&) const = default;
};

enum class DataOrder { shuffled, sequential };
enum class LrScheduleKind { constant, linear, cosine };
enum class MixedPrecision { no, bf16, fp16 };

// GradScalerKwargs: the dynamic loss scaler used with fp16. hysteresis and
// min_scale are DeepSpeed's (fp16.hysteresis, fp16.min_loss_scale); their
// defaults keep torch's GradScaler rules.
struct GradScalerOptions {
  bool enabled = true;
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  int64_t hysteresis = 1;   // overflowing steps (since the last growth) that back off; 1: every one
  double min_scale = 0.0;   // the scale never backs off below this; 0: no floor
};

// AutocastKwargs: how --mixed-precision's autocast behaves.
struct AutocastOptions {
  bool enabled = true;        // false: the forward runs in fp32 whatever --mixed-precision says
  bool cache_enabled = true;  // torch's cache of weight casts inside one autocast region
};

// InitProcessGroupKwargs: the communication layer.
struct CommSettings {
  std::string backend = "auto";  // auto (NCCL for CUDA tensors, MPI otherwise), mpi, nccl
  double timeout_s = 1800.0;     // every collective's deadline, in [0.001, 604800] (cli/options.h)
  // Large all_reduces over groups spanning nodes evenly run in three rings
  // (comm::CommOptions::hierarchical_all_reduce).
  bool hierarchical_all_reduce = true;
  // Accept a mesh whose tensor-parallel groups span nodes (refused otherwise).
  bool tensor_parallel_across_nodes = false;
};

struct OptimizerOptions {
  double lr = 1e-3;
  double min_lr = 0.0;
  LrScheduleKind schedule = LrScheduleKind::cosine;
  int64_t warmup_steps = 0;
  // The schedule's horizon: decay ends here. 0 means --steps. Set it when a
  // run is split into legs (train 10, resume to 20) so every leg sees one curve.
  int64_t decay_steps = 0;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // max global grad norm; 0 disables clipping
  bool grad_clip_given = false;  // --grad-clip came from the user (a plugin's own clipping must then agree)
};

// --eval-every and its companions: every `every` optimizer steps and after
// the last, the mean loss over `steps` global batches of held-out windows
// (data/held_out.h says where they come from).
struct EvalOptions {
  int64_t every = 0;  // 0: no evaluation
  int64_t steps = 10;
  std::string data;   // --eval-data; empty: the last `fraction` of --data
  double fraction = 0.1;
};

struct RunConfig {
  std::vector<std::string> plugins;
  std::vector<std::string> plugin_paths;

  std::string device = "auto";  // auto: cuda:<local rank> when CUDA is available, else cpu
  std::string model = "gpt-tiny";
  ModelOverrides model_overrides;
  MoeTraining moe;

  std::string data = "synthetic";
  DataOrder data_order = DataOrder::shuffled;
  EvalOptions eval;

  int64_t steps = 100;
  int64_t batch_size = 8;   // global sequences per optimizer step
  int64_t grad_accum = 1;
  uint64_t seed = 1234;
  OptimizerOptions optimizer;
  MixedPrecision mixed_precision = MixedPrecision::no;
  // Steps whose global loss is NaN or inf that are skipped (no update)
  // before the run stops; 0 stops at the first.
  int64_t nonfinite_loss_skips = 0;
  AutocastOptions autocast;
  // --fused-kernels: on a CUDA device, the model's norms, SwiGLU, rotary and
  // loss as the host's fused kernels (host/model/fused_ops.h); false keeps
  // ATen's composition there too, for comparison. The CPU always keeps it.
  bool fused_kernels = true;
  CommSettings comm;
  GradScalerOptions grad_scaler;

  std::string save_dir;
  int64_t save_every = 0;   // 0: save only at the end (when --save is given)
  // --save-async: periodic saves write their files in the background
  // (train/async_checkpoint.h); the final and the signal's save stay blocking.
  bool save_async = false;
  // --snapshot-every N: every N steps a background save into snapshot_dir,
  // a directory in memory (tmpfs), holding the newest one only; `--resume
  // auto` takes it when it is newer than --save's newest and every rank sees
  // it whole. Empty snapshot_dir: /dev/shm/accel-snapshots/<hash of --save>
  // (resolve_snapshot_dir in app/run.cpp).
  int64_t snapshot_every = 0;
  std::string snapshot_dir;
  std::string resume;
  // "hf:DIR": the model's shape and initial weights from a transformers
  // checkpoint directory (checkpoint/hf_checkpoint.h) instead of the seed.
  std::string init_from;
  // What init_from's config.json said beyond the shape (set with it, by app/run.cpp).
  HfConfigKeys init_hf_keys;

  std::string metrics_file;
  std::string tensorboard_dir;  // rank 0 writes TensorBoard scalars here
  std::string log_level = "info";
  int64_t log_every = 10;
  int threads = 0;          // intra-op threads; 0 keeps LibTorch's default
};

const char* to_string(DataOrder order);
const char* to_string(LrScheduleKind kind);
const char* to_string(MixedPrecision precision);

}  // namespace accel
