// accelerate's launch arguments and config keys (accelerate_keys.h). The
// table lists accelerate 1.15.0's `launch` arguments in the order launch.py
// declares them, then the file keys that are no flag; keys an older
// accelerate wrote (fsdp_backward_prefetch_policy, tp_config, ipex_config)
// and the spellings its questionnaire writes (fp8_config.amax_history_length)
// are kept, since users' files still hold them.
#include "host/cli/accelerate_keys.h"

#include <cstring>

namespace accel::cli {
namespace {

constexpr const char* kTpu = "there are no TPUs in Accel";
constexpr const char* kNoScript =
    "accel-host is the program (there is no script to run); training options go after --";
constexpr const char* kTorchrun = "it configures torchrun, and mpirun (or srun) starts Accel's ranks";
constexpr const char* kSageMaker = "a SageMaker setting: Accel runs on the machines it is started on";
constexpr const char* kMegatronCore =
    "a Megatron-LM setting Accel's megatron plugin does not have (docs/launch.md lists those it has)";

constexpr FlagKind N = FlagKind::none, S = FlagKind::switch_, V = FlagKind::value, A = FlagKind::append;
constexpr const char* kTop = "";
constexpr const char* kFlag = nullptr;

// name, file section, flag, refusal, inert values
constexpr AccelerateKey kKeys[] = {
    // accelerate launch's arguments, in launch.py's order.
    {"help", kFlag, S, nullptr, nullptr},
    {"config_file", kFlag, V, nullptr, nullptr},
    {"quiet", kFlag, S, nullptr, nullptr},
    {"cpu", kFlag, S, nullptr, nullptr},
    {"multi_gpu", kFlag, S, nullptr, nullptr},
    {"tpu", kFlag, S, kTpu, nullptr},
    {"mixed_precision", kTop, V, nullptr, nullptr},
    {"num_processes", kTop, V, nullptr, nullptr},
    {"num_machines", kTop, V, nullptr, nullptr},
    {"num_cpu_threads_per_process", kFlag, V, nullptr, nullptr},
    {"enable_cpu_affinity", kTop, S, nullptr, nullptr},
    {"dynamo_backend", "dynamo_config", V, nullptr, nullptr},
    {"dynamo_mode", "dynamo_config", V, nullptr, nullptr},
    {"dynamo_use_fullgraph", "dynamo_config", S, nullptr, nullptr},
    {"dynamo_use_dynamic", "dynamo_config", S, nullptr, nullptr},
    {"dynamo_use_regional_compilation", "dynamo_config", S, nullptr, nullptr},
    {"use_deepspeed", kFlag, S, nullptr, nullptr},
    {"use_fsdp", kFlag, S, nullptr, nullptr},
    {"use_parallelism_config", kFlag, S, nullptr, nullptr},
    {"use_megatron_lm", kFlag, S, nullptr, nullptr},
    {"gpu_ids", kTop, V, nullptr, nullptr},
    {"same_network", kTop, S, nullptr, nullptr},
    {"machine_rank", kTop, V, nullptr, nullptr},
    {"main_process_ip", kTop, V, nullptr, nullptr},
    {"main_process_port", kTop, V, nullptr, nullptr},
    {"tee", kFlag, V, "mpirun prints every rank's output (its --output-filename writes it to files)", "0"},
    {"log_dir", kFlag, V, "mpirun prints every rank's output (its --output-filename writes it to files)", ""},
    {"role", kFlag, V, kTorchrun, "default"},
    {"rdzv_backend", kTop, V, nullptr, nullptr},
    {"rdzv_conf", kFlag, V, kTorchrun, ""},
    {"max_restarts", kFlag, V, nullptr, nullptr},
    {"monitor_interval", kFlag, V, nullptr, nullptr},
    {"module", kFlag, S, kNoScript, nullptr},
    {"no_python", kFlag, S, kNoScript, nullptr},
    {"tpu_cluster", kFlag, S, kTpu, nullptr},
    {"no_tpu_cluster", kFlag, S, kTpu, nullptr},
    {"tpu_use_sudo", kTop, S, kTpu, "false"},
    {"vm", kFlag, A, kTpu, nullptr},
    {"env", kFlag, A, kTpu, nullptr},
    {"main_training_function", kTop, V, "accel-host's training loop is the program", "main"},
    {"downcast_bf16", kTop, S, kTpu, "false|False|no"},  // the questionnaire writes 'no'
    {"deepspeed_config_file", "deepspeed_config", V, nullptr, nullptr},
    {"zero_stage", "deepspeed_config", V, nullptr, nullptr},
    {"offload_optimizer_device", "deepspeed_config", V, nullptr, nullptr},
    {"offload_param_device", "deepspeed_config", V, nullptr, nullptr},
    {"offload_optimizer_nvme_path", "deepspeed_config", V, nullptr, nullptr},
    {"offload_param_nvme_path", "deepspeed_config", V, nullptr, nullptr},
    {"gradient_accumulation_steps", "deepspeed_config", V, nullptr, nullptr},
    {"gradient_clipping", "deepspeed_config", V, nullptr, nullptr},
    {"zero3_init_flag", "deepspeed_config", V, nullptr, nullptr},
    {"zero3_save_16bit_model", "deepspeed_config", V, nullptr, nullptr},
    {"deepspeed_hostfile", "deepspeed_config", V, nullptr, nullptr},
    {"deepspeed_exclusion_filter", "deepspeed_config", V, "name the hosts in the hostfile instead", ""},
    {"deepspeed_inclusion_filter", "deepspeed_config", V, "name the hosts in the hostfile instead", ""},
    {"deepspeed_multinode_launcher", "deepspeed_config", V, nullptr, nullptr},
    {"deepspeed_moe_layer_cls_names", "deepspeed_config", V, nullptr, nullptr},
    {"fsdp_version", "fsdp_config", V, nullptr, nullptr},
    {"fsdp_offload_params", "fsdp_config", V, nullptr, nullptr},
    {"fsdp_min_num_params", "fsdp_config", V, nullptr, nullptr},
    {"fsdp_sharding_strategy", "fsdp_config", V, nullptr, nullptr},
    {"fsdp_reshard_after_forward", "fsdp_config", V, nullptr, nullptr},
    {"fsdp_auto_wrap_policy", "fsdp_config", V, nullptr, nullptr},
    {"fsdp_transformer_layer_cls_to_wrap", "fsdp_config", V, nullptr, nullptr},
    {"fsdp_backward_prefetch", "fsdp_config", V, nullptr, nullptr},
    {"fsdp_state_dict_type", "fsdp_config", V, nullptr, nullptr},
    {"fsdp_forward_prefetch", "fsdp_config", V, nullptr, nullptr},
    {"fsdp_use_orig_params", "fsdp_config", V, nullptr, nullptr},
    {"fsdp_cpu_ram_efficient_loading", "fsdp_config", V, nullptr, nullptr},
    {"fsdp_sync_module_states", "fsdp_config", V, nullptr, nullptr},
    {"fsdp_activation_checkpointing", "fsdp_config", V, nullptr, nullptr},
    {"fsdp_activation_checkpointing_offload", "fsdp_config", V,
     "activation checkpoints are recomputed in backward, never offloaded", "false|False"},
    {"megatron_lm_tp_degree", "megatron_lm_config", V, nullptr, nullptr},
    {"megatron_lm_use_custom_fsdp", "megatron_lm_config", V, kMegatronCore, "false|False"},
    {"megatron_lm_no_load_optim", "megatron_lm_config", V, kMegatronCore, "false|False"},
    {"megatron_lm_eod_mask_loss", "megatron_lm_config", V, kMegatronCore, "false|False"},
    {"megatron_lm_overlap_cpu_optimizer_d2h_h2d", "megatron_lm_config", V, kMegatronCore, "false|False"},
    {"megatron_lm_no_save_optim", "megatron_lm_config", V, kMegatronCore, "false|False"},
    {"megatron_lm_optimizer_cpu_offload", "megatron_lm_config", V, kMegatronCore, "false|False"},
    {"megatron_lm_use_precision_aware_optimizer", "megatron_lm_config", V, kMegatronCore, "false|False"},
    {"megatron_lm_decoder_last_pipeline_num_layers", "megatron_lm_config", V, kMegatronCore, nullptr},
    {"megatron_lm_pp_degree", "megatron_lm_config", V, nullptr, nullptr},
    {"megatron_lm_num_micro_batches", "megatron_lm_config", V, nullptr, nullptr},
    {"megatron_lm_sequence_parallelism", "megatron_lm_config", V, nullptr, nullptr},
    {"megatron_lm_recompute_activations", "megatron_lm_config", V, nullptr, nullptr},
    {"megatron_lm_use_distributed_optimizer", "megatron_lm_config", V, nullptr, nullptr},
    {"megatron_lm_gradient_clipping", "megatron_lm_config", V, nullptr, nullptr},
    {"megatron_lm_recompute_granularity", "megatron_lm_config", V, nullptr, nullptr},
    {"megatron_lm_recompute_method", "megatron_lm_config", V, kMegatronCore, nullptr},
    {"megatron_lm_recompute_num_layers", "megatron_lm_config", V, kMegatronCore, nullptr},
    {"megatron_lm_attention_backend", "megatron_lm_config", V, kMegatronCore, nullptr},
    {"megatron_lm_expert_model_parallel_size", "megatron_lm_config", V, nullptr, nullptr},
    {"megatron_lm_context_parallel_size", "megatron_lm_config", V, nullptr, nullptr},
    {"megatron_lm_attention_dropout", "megatron_lm_config", V, "Accel's models have no dropout", "0|0.0"},
    {"megatron_lm_hidden_dropout", "megatron_lm_config", V, "Accel's models have no dropout", "0|0.0"},
    {"megatron_lm_attention_softmax_in_fp32", "megatron_lm_config", V,
     "the host's attention decides its softmax precision", nullptr},
    {"megatron_lm_expert_tensor_parallel_size", "megatron_lm_config", V, kMegatronCore, "1"},
    {"megatron_lm_calculate_per_token_loss", "megatron_lm_config", V, kMegatronCore, "false|False"},
    {"megatron_lm_use_rotary_position_embeddings", "megatron_lm_config", V,
     "the model decides its position embeddings (--model)", nullptr},
    {"fp8_backend", "fp8_config", V, nullptr, nullptr},
    {"fp8_use_autocast_during_eval", "fp8_config", S, nullptr, nullptr},
    {"fp8_margin", "fp8_config", V, nullptr, nullptr},
    {"fp8_interval", "fp8_config", V, nullptr, nullptr},
    {"fp8_format", "fp8_config", V, nullptr, nullptr},
    {"fp8_amax_history_len", "fp8_config", V, nullptr, nullptr},
    {"fp8_amax_compute_algo", "fp8_config", V, nullptr, nullptr},
    {"fp8_override_linear_precision", "fp8_config", V, nullptr, nullptr},
    {"fp8_opt_level", "fp8_config", V, nullptr, nullptr},
    {"fp8_enable_fsdp_float8_all_gather", "fp8_config", V, nullptr, nullptr},
    {"fp8_pad_inner_dim", "fp8_config", V, nullptr, nullptr},
    {"aws_access_key_id", kFlag, V, kSageMaker, nullptr},
    {"aws_secret_access_key", kFlag, V, kSageMaker, nullptr},
    {"debug", kTop, S, nullptr, nullptr},
    {"mpirun_hostfile", "mpirun_config", V, nullptr, nullptr},
    {"parallelism_config_dp_replicate_size", "parallelism_config", V, nullptr, nullptr},
    {"parallelism_config_dp_shard_size", "parallelism_config", V, nullptr, nullptr},
    {"parallelism_config_tp_size", "parallelism_config", V, nullptr, nullptr},
    {"parallelism_config_cp_size", "parallelism_config", V, nullptr, nullptr},
    {"parallelism_config_cp_backend", "parallelism_config", V, "context parallelism is Accel's own, not torch's",
     "torch"},
    {"parallelism_config_cp_comm_strategy", "parallelism_config", V, nullptr, nullptr},
    {"parallelism_config_sp_size", "parallelism_config", V, nullptr, nullptr},
    {"parallelism_config_sp_backend", "parallelism_config", V, "Accel's sequence parallelism is its own",
     "deepspeed"},
    {"parallelism_config_sp_seq_length", "parallelism_config", V, "the model's --seq-len is the sequence length",
     ""},
    {"parallelism_config_sp_seq_length_is_variable", "parallelism_config", V, nullptr, nullptr},
    {"parallelism_config_sp_attn_implementation", "parallelism_config", V,
     "the host's fused attention is the implementation", "sdpa"},
    // Accel's own launch flags (accel-host launch --help).
    {"use_cpu", kTop, S, nullptr, nullptr},
    {"hostfile", kFlag, V, nullptr, nullptr},
    {"dry_run", kFlag, S, nullptr, nullptr},
    {"min_ranks", kFlag, V, nullptr, nullptr},
    {"restart_backoff", kFlag, V, nullptr, nullptr},
    // ClusterConfig's keys that are no flag.
    {"compute_environment", kTop, N, nullptr, nullptr},
    {"distributed_type", kTop, N, nullptr, nullptr},
    {"fp16", kTop, N, nullptr, nullptr},  // the older spelling process_config converts
    {"dynamo_backend", kTop, N, nullptr, nullptr},  // older: top level, converted into dynamo_config
    {"tpu_name", kTop, N, kTpu, ""},
    {"tpu_zone", kTop, N, kTpu, ""},
    {"tpu_use_cluster", kTop, N, kTpu, "false"},
    {"command_file", kTop, N, kTpu, ""},
    {"commands", kTop, N, kTpu, ""},
    {"tpu_vm", kTop, N, kTpu, ""},
    {"tpu_env", kTop, N, kTpu, ""},  // the questionnaire writes tpu_env: [] into every file
    {"mpirun_ccl", "mpirun_config", N, nullptr, nullptr},
    {"fsdp_backward_prefetch_policy", "fsdp_config", N, nullptr, nullptr},  // older accelerate
    {"fsdp_ignored_modules", "fsdp_config", N, nullptr, nullptr},
    {"fp8_amax_history_length", "fp8_config", N, nullptr, nullptr},  // the questionnaire's spellings
    {"fp8_amax_compute_algorithm", "fp8_config", N, nullptr, nullptr},
    {"fp8_optimization_level", "fp8_config", N, nullptr, nullptr},
    {"ipex", "ipex_config", N, "Intel's extension is Python", "false"},  // older accelerate
    {"tp_size", "tp_config", N, "use distributed_type MEGATRON_LM with megatron_lm_tp_degree", "1"},
};

bool same(const char* a, const char* b) { return a == b || (a != nullptr && b != nullptr && std::strcmp(a, b) == 0); }

}  // namespace

const AccelerateKey* find_accelerate_key(const std::string& name, const char* section) {
  for (const AccelerateKey& key : kKeys) {
    if (name != key.name) continue;
    if (section == nullptr ? key.flag != FlagKind::none : same(key.section, section)) return &key;
  }
  return nullptr;
}

const AccelerateKey* accelerate_keys_begin() { return std::begin(kKeys); }
const AccelerateKey* accelerate_keys_end() { return std::end(kKeys); }

bool is_inert(const AccelerateKey& key, const std::string& value) {
  if (key.inert == nullptr) return false;
  const std::string inert = key.inert;
  size_t start = 0;
  while (start <= inert.size()) {
    const size_t end = std::min(inert.find('|', start), inert.size());
    if (inert.compare(start, end - start, value) == 0) return true;
    start = end + 1;
  }
  return false;
}

std::string launch_name(const std::string& section, const std::string& key) {
  const auto prefixed = [&](const std::string& prefix) { return key.rfind(prefix, 0) == 0 ? key : prefix + key; };
  if (section == "fsdp_config") return key.rfind("fsdp", 0) == 0 ? key : "fsdp_" + key;
  if (section == "fp8_config") return key.rfind("fp8", 0) == 0 ? key : "fp8_" + key;
  if (section == "dynamo_config") return prefixed("dynamo_");
  return key;
}

}  // namespace accel::cli
