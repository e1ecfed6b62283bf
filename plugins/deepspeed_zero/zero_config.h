// zero_config.h — DeepSpeedPlugin's fields and a DeepSpeed JSON config
// (hf_ds_config) resolved into one ZeroConfig, as DeepSpeed and Accelerate
// read them: "auto" values filled from accel-host's own settings (as
// Accelerate's deepspeed_config_process does), DeepSpeed's batch rule
// (train_batch_size = micro_batch_per_gpu x gradient_accumulation_steps x
// world size, the missing one derived), a concrete value that contradicts
// accel-host's setting or a plugin option refused naming both, keys that
// are not understood collected for one warning, keys understood but not
// honoured here refused with the reason. The JSON is read by the SDK's rule
// (accel/sdk/json_input.hpp): depth-limited, exact types, every section an
// object, "auto" only where Accelerate fills it, values in messages through
// describe() (never a whole value).
//
// Invariant: a ZeroConfig that exists is consistent and honourable. Every
// refusal is an accel::sdk::Error with one line naming the key (or option)
// and the limit. resolve_config is a pure function of its inputs (the JSON
// text, not the file), so it is unit-tested without a host. Thread-safety:
// plain values.
#pragma once

#include <accel/sdk/services.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sharding/sharding_options.h"

namespace accel::zero {

enum class OffloadDevice { none, cpu, nvme };
enum class WarmupType { log, linear };
enum class ScheduleKind { host, warmup_lr, warmup_decay_lr, warmup_cosine_lr };

const char* to_string(OffloadDevice device);
const char* to_string(ScheduleKind kind);

// accel-host's own settings (the train.* option section and the identity).
struct HostSettings {
  int32_t world_size = 1;
  // --deepspeed_zero.sequence_parallel_size: the ranks one sequence is split
  // over read the same micro-batches, so DeepSpeed's batch keys count
  // world_size / this data-parallel ranks (its dp_world_size).
  int32_t sequence_parallel_size = 1;
  int64_t batch_size = 8;              // global sequences per optimizer step (--batch-size)
  int64_t grad_accum = 1;              // --grad-accum
  double max_grad_norm = 1.0;          // --grad-clip
  bool max_grad_norm_given = false;    // the user gave --grad-clip (else max_grad_norm is its default)
  double lr = 1e-3;                    // --lr
  double min_lr = 0.0;                 // --min-lr
  double weight_decay = 0.1;           // --weight-decay
  int64_t warmup_steps = 0;            // --warmup-steps
  int64_t decay_steps = 100;           // --lr-decay-steps, else --steps
  std::string mixed_precision = "no";  // no | bf16 | fp16
  // The dynamic loss scaler under fp16 (--grad_scaler.*): what the fp16
  // section's keys must agree with.
  double loss_scale_init = 65536.0;         // --grad_scaler.init_scale
  int64_t loss_scale_growth_interval = 2000;  // --grad_scaler.growth_interval
  int64_t loss_scale_hysteresis = 1;        // --grad_scaler.hysteresis
  double loss_scale_min = 0.0;              // --grad_scaler.min_scale
};

// The --deepspeed_zero.* options; unset ones are nullopt.
struct PluginFields {
  std::string hf_ds_config;  // a path; the text is passed separately
  std::optional<int64_t> gradient_accumulation_steps;
  std::optional<double> gradient_clipping;
  std::optional<int64_t> zero_stage;
  bool is_train_batch_min = true;
  std::optional<std::string> offload_optimizer_device;
  std::optional<std::string> offload_param_device;
  std::optional<std::string> offload_optimizer_nvme_path;
  std::optional<std::string> offload_param_nvme_path;
  std::optional<bool> zero3_init_flag;
  std::optional<bool> zero3_save_16bit_model;
  std::string transformer_moe_cls_names;
  bool enable_msamp = false;
  std::optional<std::string> msamp_opt_level;
};

// The optimizer the config names (DummyOptim's meaning: it replaces
// accel-host's own AdamW settings); unset values keep the host's.
struct OptimizerChoice {
  bool from_config = false;
  std::string type;  // as written: "Adam", "AdamW"
  std::optional<double> lr, beta1, beta2, eps, weight_decay;
};

// DeepSpeed's schedules (deepspeed/runtime/lr_schedules.py); `host` keeps
// accel-host's own schedule.
struct Schedule {
  ScheduleKind kind = ScheduleKind::host;
  WarmupType warmup_type = WarmupType::log;
  double warmup_min_lr = 0.0;
  double warmup_max_lr = 1e-3;
  int64_t warmup_num_steps = 1000;
  int64_t total_num_steps = 0;
  double warmup_min_ratio = 0.0;  // WarmupCosineLR
  double cos_min_ratio = 1e-4;    // WarmupCosineLR
};

// The learning rate of the optimizer step after `step` completed steps;
// `base_lr` is the optimizer's lr (WarmupCosineLR scales it). Not for
// ScheduleKind::host.
double schedule_lr(const Schedule& schedule, int64_t step, double base_lr);

struct ZeroConfig : sharding::ShardingOptions {
  int stage = 2;
  int64_t train_batch_size = 0;
  int64_t micro_batch_per_gpu = 0;
  int64_t gradient_accumulation_steps = 1;
  // The max gradient norm the run clips to (0: none): the config's, else
  // --deepspeed_zero.gradient_clipping, else --grad-clip; those given agree.
  double gradient_clipping = 0.0;
  OffloadDevice offload_optimizer = OffloadDevice::none;
  OffloadDevice offload_param = OffloadDevice::none;
  std::string optimizer_nvme_path;
  std::string param_nvme_path;
  int64_t prefetch_bucket_size = 50000000;       // -1: "auto" (0.9 h^2), resolved when planning
  int64_t param_persistence_threshold = 100000;  // -1: "auto" (10 h), resolved when planning
  int64_t max_live_parameters = 1000000000;
  int64_t max_reuse_distance = 1000000000;
  bool save_16bit_model = false;
  // The consolidated model file's dtype: fp16 under --mixed-precision fp16,
  // else bf16 (an fp32 run's file is for inference at half the size).
  DLDataType model_16bit_dtype{kDLBfloat, 16, 1};
  OptimizerChoice optimizer;
  Schedule schedule;
  int64_t steps_per_print = 10;
  bool wall_clock_breakdown = false;
  std::vector<std::string> unknown_keys;  // for one warning
  std::vector<std::string> notes;         // info lines (what replaced the host's flags)
  // transformer_moe_cls_names, split at commas: the mixture-of-experts
  // block classes ZeRO-3 keeps whole (checked against the model when the
  // plugin is created, zero_plan.h's moe_leaf_units).
  std::vector<std::string> moe_leaf_classes;
};

// Resolves the fields and the JSON text (empty: Accelerate builds the config
// from the fields alone). `source` names the JSON in messages. Throws Error
// (ACCEL_ERROR_INVALID_ARGUMENT) with one line on any refusal.
ZeroConfig resolve_config(const PluginFields& fields, const HostSettings& host, const std::string& json_text,
                          const std::string& source);

// Reads the options and train.* through `services`, the hf_ds_config file if
// named, and resolves them; checks nvme paths are writable directories.
ZeroConfig read_config(const sdk::Services& services);

// A text from the input as a message shows it: as written when it is short
// and plain, else through sdk::describe() (quoted, escaped, cut to 40
// characters), so a message stays one bounded line (a JSON string may hold
// "\n", found by ds_config_fuzz).
std::string shown_text(const std::string& text, size_t max_as_is = 40);

// A small JSON object of the resolved configuration (checkpoints, logs).
std::string to_json(const ZeroConfig& config);

}  // namespace accel::zero
