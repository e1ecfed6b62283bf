// accel-host launch as a drop-in for `accelerate launch` (issue 50, items 5
// to 13): the one mapping from (file, launch flags, training options) to the
// accel-host arguments, as a table where each later source replaces an
// earlier one's setting whole; the launch flags' parsing; and the class
// test: accelerate's own `launch` arguments and ClusterConfig keys, written
// down below from accelerate 1.15.0's source (commands/launch.py,
// commands/config/config_args.py, commands/config/cluster.py), each either
// read or refused in one line naming it. The lists are the test's own, not
// host/cli/accelerate_keys.cpp's, so a key that table lacks fails here.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "host/cli/accelerate_config.h"
#include "host/cli/launch_flags.h"
#include "host/cli/options.h"

namespace accel::cli {
namespace {

using Pairs = std::vector<std::pair<std::string, std::string>>;
using Words = std::vector<std::string>;

// The accel-host arguments `accel-host launch FLAGS -- TRAINING` gives for
// the YAML text `yaml` ("" for no file): the options mapped and kept, as pairs.
Pairs host_options(const std::string& yaml, const Words& flags, const Words& training = {}) {
  Words args = flags;
  args.push_back("--");
  args.insert(args.end(), training.begin(), training.end());
  const LaunchFlags parsed = parse_launch_flags(args);
  const AccelerateSettings file = yaml.empty() ? AccelerateSettings{} : read_accelerate_settings(yaml, "c.yaml");
  return map_accelerate_settings(file, parsed.settings, !yaml.empty(), "c.yaml").kept_under(parsed.training_args);
}

// The one line a refusal prints, or "(accepted)".
std::string refusal(const std::string& yaml, const Words& flags, const Words& training = {}) {
  try {
    host_options(yaml, flags, training);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

const char* kFp8File =
    "distributed_type: NO\nmixed_precision: fp8\nfp8_config:\n  backend: MSAMP\n  opt_level: O2\n";
const char* kDeepSpeedAccumulation =
    "distributed_type: DEEPSPEED\ndeepspeed_config:\n  gradient_accumulation_steps: 4\n  zero_stage: 2\n";

struct Row {
  const char* what;
  std::string yaml;
  Words flags, training;
  Pairs expected;  // the mapped options left standing (the training options follow them)
};

TEST(AccelerateLaunch, LaterSourcesReplaceAnEarlierSettingWhole) {
  const std::vector<Row> rows = {
      // issue 50 item 5: the flag's precision is the plugins and options it implies.
      {"fp8 file, --mixed_precision bf16", kFp8File, {"--mixed_precision", "bf16"}, {}, {{"mixed-precision", "bf16"}}},
      {"fp8 file, --mixed_precision no", kFp8File, {"--mixed_precision", "no"}, {}, {{"mixed-precision", "no"}}},
      {"fp8 file, --mixed_precision fp8", kFp8File, {"--mixed-precision=fp8"}, {},
       {{"plugin", "fp8"}, {"fp8.backend", "msamp"}, {"fp8.opt_level", "O2"}}},
      {"bf16 file, --mixed_precision fp8", "distributed_type: NO\nmixed_precision: bf16\n", {"--mixed_precision", "fp8"},
       {}, {{"plugin", "fp8"}}},
      {"fp8 file, training --mixed-precision no", kFp8File, {}, {"--mixed-precision", "no"}, {}},
      {"fp8 file, training --fp8.backend te", kFp8File, {}, {"--fp8.backend", "te"},
       {{"plugin", "fp8"}, {"fp8.opt_level", "O2"}}},
      // issue 50 item 6: --cpu over use_cpu: true is one --device cpu.
      {"use_cpu file, --use_cpu", "distributed_type: NO\nuse_cpu: true\n", {"--use_cpu"}, {}, {{"device", "cpu"}}},
      {"use_cpu file, --cpu", "distributed_type: NO\nuse_cpu: true\n", {"--cpu"}, {}, {{"device", "cpu"}}},
      // issue 50 item 7: the training options' accumulation replaces the
      // file's, the plugin's copy included.
      {"deepspeed accumulation, training --grad-accum 2", kDeepSpeedAccumulation, {}, {"--grad-accum", "2"},
       {{"plugin", "deepspeed_zero"}, {"deepspeed_zero.zero_stage", "2"}}},
      {"deepspeed accumulation, --gradient_accumulation_steps 8", kDeepSpeedAccumulation,
       {"--gradient_accumulation_steps", "8"}, {},
       {{"plugin", "deepspeed_zero"}, {"deepspeed_zero.gradient_accumulation_steps", "8"}, {"grad-accum", "8"},
        {"deepspeed_zero.zero_stage", "2"}}},
      {"megatron micro-batches, training --grad-accum 3",
       "distributed_type: MEGATRON_LM\nmegatron_lm_config:\n  megatron_lm_num_micro_batches: 2\n", {},
       {"--grad-accum", "3"}, {{"plugin", "megatron"}}},
      // Variants of the class not listed in the issue.
      {"fsdp file, --use_deepspeed", "distributed_type: FSDP\nfsdp_config:\n  fsdp_offload_params: true\n",
       {"--use_deepspeed", "--zero_stage", "3"}, {}, {{"plugin", "deepspeed_zero"}, {"deepspeed_zero.zero_stage", "3"}}},
      {"fsdp file, training --plugin ddp", "distributed_type: FSDP\nfsdp_config:\n  fsdp_offload_params: true\n", {},
       {"--plugin", "ddp"}, {}},
      {"fsdp file, training --plugin fsdp keeps the file's fsdp options",
       "distributed_type: FSDP\nfsdp_config:\n  fsdp_offload_params: true\n", {}, {"--plugin=fsdp"},
       {{"fsdp.cpu_offload", "true"}}},
      {"megatron clipping, training --grad-clip 0.5",
       "distributed_type: MEGATRON_LM\nmegatron_lm_config:\n  megatron_lm_gradient_clipping: 1.0\n", {},
       {"--grad-clip", "0.5"}, {{"plugin", "megatron"}}},
      {"threads, training --threads 1", "distributed_type: NO\n", {"--num_cpu_threads_per_process", "4"},
       {"--threads", "1"}, {}},
      {"no file, --use_fsdp --fsdp_sharding_strategy 2", "", {"--use_fsdp", "--fsdp_sharding_strategy", "2"}, {},
       {{"plugin", "fsdp"}, {"fsdp.sharding_strategy", "SHARD_GRAD_OP"}}},
  };
  for (const Row& row : rows) EXPECT_EQ(host_options(row.yaml, row.flags, row.training), row.expected) << row.what;
}

// issue 50 item 12: a DeepSpeed JSON's concrete fp16, loss scale and
// accumulation decide, as accelerate lets them.
TEST(AccelerateLaunch, TheDeepSpeedJsonDecidesWhatItMakesConcrete) {
  const std::filesystem::path json = std::filesystem::temp_directory_path() /
                                     ("accel_launch_test_" + std::to_string(::getpid()) + ".json");
  std::ofstream(json) << R"({"fp16": {"enabled": true, "loss_scale": 0, "loss_scale_window": 1000,
    "initial_scale_power": 16, "hysteresis": 2, "min_loss_scale": 1},
    "gradient_accumulation_steps": 2, "zero_optimization": {"stage": 1}})";
  const std::string yaml = "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: " +
                           json.string() + "\n";
  EXPECT_EQ(host_options(yaml, {}), (Pairs{{"plugin", "deepspeed_zero"},
                                           {"deepspeed_zero.hf_ds_config", json.string()},
                                           {"mixed-precision", "fp16"},
                                           {"grad_scaler.init_scale", "65536"},
                                           {"grad_scaler.growth_interval", "1000"},
                                           {"grad_scaler.hysteresis", "2"},
                                           {"grad_scaler.min_scale", "1"},
                                           {"grad-accum", "2"}}));
  // A precision the JSON contradicts is refused, as accelerate refuses it.
  EXPECT_EQ(refusal(yaml, {"--mixed_precision", "bf16"}).find("--mixed_precision bf16 cannot be used with"), 0u);
  std::filesystem::remove(json);
}

TEST(AccelerateLaunch, FlagsAreReadAsAccelerateLaunchReadsThem) {
  // issue 50 item 13: --dynamo_backend no is accepted, a backend refused.
  EXPECT_EQ(refusal("", {"--dynamo_backend", "no"}), "(accepted)");
  EXPECT_EQ(refusal("", {"--dynamo_backend", "inductor"}),
            "--dynamo_backend is not honoured: there is no torch.compile in a C++ host");
  // A flag missing its value is refused, not given the next flag.
  EXPECT_EQ(refusal("", {"--main_process_ip", "--dry_run"}), "accel-host launch: --main_process_ip needs a value");
  EXPECT_EQ(refusal("", {"--num_processes"}), "accel-host launch: --num_processes needs a value");
  EXPECT_EQ(refusal("", {"--tee", "-q"}), "accel-host launch: --tee needs a value");
  EXPECT_EQ(refusal("", {"--dry_run=yes"}), "accel-host launch: --dry_run takes no value");
  EXPECT_EQ(refusal("", {"--fsdp_min_num_params", "-1"}).find("--fsdp_min_num_params"), std::string::npos)
      << "a negative number is a value (read only under FSDP)";
  EXPECT_EQ(refusal("", {"--bogus"}).find("accel-host launch: \"--bogus\" is not a flag of accelerate launch"), 0u);
  EXPECT_EQ(refusal("", {"--use_fsdp", "--multi_gpu"}).find("--multi_gpu and --use_fsdp: only one of"), 0u);
  EXPECT_EQ(refusal("", {"script.py"}),
            "accel-host launch: \"script.py\" is not a launch option; training options go after --");
  // Found by accelerate_config_fuzz: a word and a flag's value holding a newline.
  EXPECT_EQ(refusal("", {"two\nlines"}).find('\n'), std::string::npos);
  EXPECT_EQ(refusal("", {"--use_fsdp", "--fsdp_sharding_strategy", "FULL_SHARD\n[ddp]"}),
            "accel-host launch: --fsdp_sharding_strategy must be one line without control characters");
  EXPECT_EQ(refusal("", {"--num-processes", "2x"}), "--num_processes must be a whole number from 1 to 1048576, got \"2x\"");
  // Hyphens, = and repetition as argparse reads them.
  const LaunchFlags flags = parse_launch_flags({"--num-processes=4", "--env", "A=1", "--env", "B=2", "-q", "--help"});
  EXPECT_EQ(flags.settings.at("num_processes").value, "4");
  EXPECT_EQ(flags.settings.at("env").value, "A=1,B=2");
  EXPECT_TRUE(flags.help);
  EXPECT_NE(launch_help().find("--fsdp_offload_params V"), std::string::npos);
}

// ---- the class test: accelerate 1.15.0's vocabulary, each mapped or refused by name

struct Flag {
  const char* name;
  const char* sample;  // nullptr: a switch
};

// `accelerate launch`'s arguments (accelerate 1.15.0, commands/launch.py, in
// its order; -h/-q/-t/-m are short forms of help/quiet/tee/module), with
// values a user would give (accelerate's defaults mostly).
const Flag kAccelerateLaunchFlags[] = {
    {"help", nullptr}, {"config_file", "c.yaml"}, {"quiet", nullptr}, {"cpu", nullptr}, {"multi_gpu", nullptr},
    {"tpu", nullptr}, {"mixed_precision", "bf16"}, {"num_processes", "2"}, {"num_machines", "1"},
    {"num_cpu_threads_per_process", "2"}, {"enable_cpu_affinity", nullptr}, {"dynamo_backend", "no"},
    {"dynamo_mode", "default"}, {"dynamo_use_fullgraph", nullptr}, {"dynamo_use_dynamic", nullptr},
    {"dynamo_use_regional_compilation", nullptr}, {"use_deepspeed", nullptr}, {"use_fsdp", nullptr},
    {"use_parallelism_config", nullptr}, {"use_megatron_lm", nullptr}, {"gpu_ids", "all"},
    {"same_network", nullptr}, {"machine_rank", "0"}, {"main_process_ip", "10.0.0.1"},
    {"main_process_port", "29500"}, {"tee", "0"}, {"log_dir", "logs"}, {"role", "default"},
    {"rdzv_backend", "static"}, {"rdzv_conf", ""}, {"max_restarts", "0"}, {"monitor_interval", "0.1"},
    {"module", nullptr}, {"no_python", nullptr}, {"tpu_cluster", nullptr}, {"no_tpu_cluster", nullptr},
    {"tpu_use_sudo", nullptr}, {"vm", "vm0"}, {"env", "A=1"}, {"main_training_function", "main"},
    {"downcast_bf16", nullptr}, {"deepspeed_config_file", "ds.json"}, {"zero_stage", "2"},
    {"offload_optimizer_device", "none"}, {"offload_param_device", "none"}, {"offload_optimizer_nvme_path", "/nvme"},
    {"offload_param_nvme_path", "/nvme"}, {"gradient_accumulation_steps", "1"}, {"gradient_clipping", "1.0"},
    {"zero3_init_flag", "true"}, {"zero3_save_16bit_model", "false"}, {"deepspeed_hostfile", "hosts"},
    {"deepspeed_exclusion_filter", ""}, {"deepspeed_inclusion_filter", ""},
    {"deepspeed_multinode_launcher", "standard"}, {"deepspeed_moe_layer_cls_names", "MixtralSparseMoeBlock"},
    {"fsdp_version", "1"}, {"fsdp_offload_params", "false"}, {"fsdp_min_num_params", "100000000"},
    {"fsdp_sharding_strategy", "FULL_SHARD"}, {"fsdp_reshard_after_forward", "true"},
    {"fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP"}, {"fsdp_transformer_layer_cls_to_wrap", "GPT2Block"},
    {"fsdp_backward_prefetch", "BACKWARD_PRE"}, {"fsdp_state_dict_type", "SHARDED_STATE_DICT"},
    {"fsdp_forward_prefetch", "false"}, {"fsdp_use_orig_params", "true"}, {"fsdp_cpu_ram_efficient_loading", "true"},
    {"fsdp_sync_module_states", "true"}, {"fsdp_activation_checkpointing", "false"},
    {"fsdp_activation_checkpointing_offload", "false"}, {"megatron_lm_tp_degree", "1"},
    {"megatron_lm_use_custom_fsdp", "False"}, {"megatron_lm_no_load_optim", "False"},
    {"megatron_lm_eod_mask_loss", "False"}, {"megatron_lm_overlap_cpu_optimizer_d2h_h2d", "False"},
    {"megatron_lm_no_save_optim", "False"}, {"megatron_lm_optimizer_cpu_offload", "False"},
    {"megatron_lm_use_precision_aware_optimizer", "False"}, {"megatron_lm_decoder_last_pipeline_num_layers", "2"},
    {"megatron_lm_pp_degree", "1"}, {"megatron_lm_num_micro_batches", "2"},
    {"megatron_lm_sequence_parallelism", "false"}, {"megatron_lm_recompute_activations", "false"},
    {"megatron_lm_use_distributed_optimizer", "false"}, {"megatron_lm_gradient_clipping", "1.0"},
    {"megatron_lm_recompute_granularity", "selective"}, {"megatron_lm_recompute_method", "uniform"},
    {"megatron_lm_recompute_num_layers", "1"}, {"megatron_lm_attention_backend", "flash"},
    {"megatron_lm_expert_model_parallel_size", "1"}, {"megatron_lm_context_parallel_size", "1"},
    {"megatron_lm_attention_dropout", "0.0"}, {"megatron_lm_hidden_dropout", "0.0"},
    {"megatron_lm_attention_softmax_in_fp32", "true"}, {"megatron_lm_expert_tensor_parallel_size", "1"},
    {"megatron_lm_calculate_per_token_loss", "False"}, {"megatron_lm_use_rotary_position_embeddings", "true"},
    {"fp8_backend", "te"}, {"fp8_use_autocast_during_eval", nullptr}, {"fp8_margin", "0"}, {"fp8_interval", "1"},
    {"fp8_format", "HYBRID"}, {"fp8_amax_history_len", "1024"}, {"fp8_amax_compute_algo", "most_recent"},
    {"fp8_override_linear_precision", "false,false,false"}, {"fp8_opt_level", "O2"},
    {"fp8_enable_fsdp_float8_all_gather", "true"}, {"fp8_pad_inner_dim", "true"}, {"aws_access_key_id", "key"},
    {"aws_secret_access_key", "secret"}, {"debug", nullptr}, {"mpirun_hostfile", "hosts"},
    {"parallelism_config_dp_replicate_size", "1"}, {"parallelism_config_dp_shard_size", "1"},
    {"parallelism_config_tp_size", "1"}, {"parallelism_config_cp_size", "1"},
    {"parallelism_config_cp_backend", "torch"}, {"parallelism_config_cp_comm_strategy", "allgather"},
    {"parallelism_config_sp_size", "1"}, {"parallelism_config_sp_backend", "deepspeed"},
    {"parallelism_config_sp_seq_length", "128"}, {"parallelism_config_sp_seq_length_is_variable", "True"},
    {"parallelism_config_sp_attn_implementation", "sdpa"},
};

// ClusterConfig's fields (config_args.py) and the section keys cluster.py's
// questionnaire writes, as `key: value` lines of a file (a section key as
// "section.key").
const std::pair<const char*, const char*> kClusterConfigKeys[] = {
    {"compute_environment", "LOCAL_MACHINE"}, {"mixed_precision", "'no'"}, {"use_cpu", "false"},
    {"debug", "false"}, {"num_processes", "2"}, {"machine_rank", "0"}, {"num_machines", "1"},
    {"gpu_ids", "all"}, {"main_process_ip", "10.0.0.1"}, {"main_process_port", "29500"},
    {"rdzv_backend", "static"}, {"same_network", "true"}, {"main_training_function", "main"},
    {"enable_cpu_affinity", "false"}, {"downcast_bf16", "'no'"}, {"tpu_name", "tpu0"}, {"tpu_zone", "zone"},
    {"tpu_use_cluster", "false"}, {"tpu_use_sudo", "false"}, {"command_file", "cmds.txt"}, {"commands", "[]"},
    {"tpu_vm", "[]"}, {"tpu_env", "[]"}, {"fp16", "true"}, {"dynamo_backend", "'NO'"},
    {"deepspeed_config.deepspeed_config_file", "ds.json"}, {"deepspeed_config.deepspeed_exclusion_filter", "''"},
    {"deepspeed_config.deepspeed_hostfile", "hosts"}, {"deepspeed_config.deepspeed_inclusion_filter", "''"},
    {"deepspeed_config.deepspeed_moe_layer_cls_names", "MixtralSparseMoeBlock"},
    {"deepspeed_config.deepspeed_multinode_launcher", "standard"},
    {"deepspeed_config.gradient_accumulation_steps", "1"}, {"deepspeed_config.gradient_clipping", "1.0"},
    {"deepspeed_config.offload_optimizer_device", "none"}, {"deepspeed_config.offload_optimizer_nvme_path", "/nvme"},
    {"deepspeed_config.offload_param_device", "none"}, {"deepspeed_config.offload_param_nvme_path", "/nvme"},
    {"deepspeed_config.zero3_init_flag", "true"}, {"deepspeed_config.zero3_save_16bit_model", "true"},
    {"deepspeed_config.zero_stage", "3"}, {"fsdp_config.fsdp_activation_checkpointing", "false"},
    {"fsdp_config.fsdp_auto_wrap_policy", "SIZE_BASED_WRAP"}, {"fsdp_config.fsdp_backward_prefetch", "BACKWARD_PRE"},
    {"fsdp_config.fsdp_cpu_ram_efficient_loading", "true"}, {"fsdp_config.fsdp_forward_prefetch", "false"},
    {"fsdp_config.fsdp_min_num_params", "1000"}, {"fsdp_config.fsdp_offload_params", "false"},
    {"fsdp_config.fsdp_reshard_after_forward", "true"}, {"fsdp_config.fsdp_state_dict_type", "FULL_STATE_DICT"},
    {"fsdp_config.fsdp_sync_module_states", "true"}, {"fsdp_config.fsdp_transformer_layer_cls_to_wrap", "GPT2Block"},
    {"fsdp_config.fsdp_use_orig_params", "true"}, {"fsdp_config.fsdp_version", "2"},
    {"fp8_config.backend", "TE"}, {"fp8_config.use_autocast_during_eval", "false"}, {"fp8_config.margin", "0"},
    {"fp8_config.interval", "1"}, {"fp8_config.fp8_format", "E4M3"}, {"fp8_config.amax_history_length", "1024"},
    {"fp8_config.amax_compute_algorithm", "max"}, {"fp8_config.override_linear_precision", "[false, false, false]"},
    {"fp8_config.optimization_level", "O2"}, {"fp8_config.enable_fsdp_float8_all_gather", "true"},
    {"fp8_config.pad_inner_dim", "true"}, {"megatron_lm_config.megatron_lm_gradient_clipping", "1.0"},
    {"megatron_lm_config.megatron_lm_num_micro_batches", "2"}, {"megatron_lm_config.megatron_lm_pp_degree", "1"},
    {"megatron_lm_config.megatron_lm_recompute_activations", "true"},
    {"megatron_lm_config.megatron_lm_sequence_parallelism", "true"}, {"megatron_lm_config.megatron_lm_tp_degree", "1"},
    {"megatron_lm_config.megatron_lm_use_distributed_optimizer", "false"},
    {"mpirun_config.mpirun_hostfile", "hosts"}, {"dynamo_config.dynamo_backend", "'NO'"},
    {"dynamo_config.dynamo_mode", "default"}, {"dynamo_config.dynamo_use_dynamic", "false"},
    {"dynamo_config.dynamo_use_fullgraph", "false"}, {"dynamo_config.dynamo_use_regional_compilation", "false"},
    {"parallelism_config.parallelism_config_cp_comm_strategy", "allgather"},
    {"parallelism_config.parallelism_config_cp_size", "1"},
    {"parallelism_config.parallelism_config_dp_replicate_size", "1"},
    {"parallelism_config.parallelism_config_dp_shard_size", "2"}, {"parallelism_config.parallelism_config_tp_size", "1"},
};

// Each distributed type whose keys are read, as a file's first lines.
const char* kTypes[] = {"distributed_type: NO\n", "distributed_type: FSDP\n", "distributed_type: DEEPSPEED\n",
                        "distributed_type: MEGATRON_LM\nmixed_precision: fp8\n", "distributed_type: MULTI_CPU\n"};

// The outcome must be accepted or a UsageError naming `name`; anything else
// (the generic "not a flag"/"not a key", a key read by nothing, another
// exception) fails.
void expect_mapped_or_refused_by_name(const std::function<void()>& run, const std::string& name,
                                      const std::string& context) {
  try {
    run();
  } catch (const UsageError& e) {
    const std::string line = e.what();
    EXPECT_NE(line.find(name), std::string::npos) << context << ": " << line;
    EXPECT_EQ(line.find("is not a flag of accelerate launch"), std::string::npos) << context << ": " << line;
    EXPECT_EQ(line.find("is not a key of accelerate"), std::string::npos) << context << ": " << line;
  } catch (const std::exception& e) {
    ADD_FAILURE() << context << ": " << e.what();
  }
}

TEST(AccelerateLaunch, EveryFlagOfAccelerateLaunchIsMappedOrRefusedByName) {
  for (const Flag& flag : kAccelerateLaunchFlags) {
    for (const char* type : kTypes) {
      Words words = {std::string("--") + flag.name};
      if (flag.sample != nullptr) words.push_back(flag.sample);
      expect_mapped_or_refused_by_name([&] { host_options(type, words); }, std::string("--") + flag.name,
                                       std::string(type) + " with --" + flag.name);
    }
  }
}

TEST(AccelerateLaunch, EveryKeyOfClusterConfigIsMappedOrRefusedByName) {
  for (const auto& [key, sample] : kClusterConfigKeys) {
    const std::string dotted = key;
    const size_t dot = dotted.find('.');
    const std::string line = dot == std::string::npos
                                 ? dotted + ": " + sample + "\n"
                                 : dotted.substr(0, dot) + ":\n  " + dotted.substr(dot + 1) + ": " + sample + "\n";
    for (const char* type : kTypes) {
      expect_mapped_or_refused_by_name([&] { parse_accelerate_config(std::string(type) + line, "c.yaml"); }, dotted,
                                       std::string(type) + line);
    }
  }
}

}  // namespace
}  // namespace accel::cli
