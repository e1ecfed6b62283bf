// The accelerate config reader (host/cli/accelerate_config.h): what each key
// of `accelerate config`'s YAML becomes, and the one line for each key that
// cannot be honoured. tests/python/test_launch.py runs the published
// templates end to end.
#include "host/cli/accelerate_config.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "host/cli/options.h"

namespace accel::cli {
namespace {

using Options = std::vector<std::pair<std::string, std::string>>;

std::string refusal(const std::string& yaml) {
  try {
    parse_accelerate_config(yaml, "c.yaml");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(AccelerateConfig, FsdpSectionMapsOntoTheFsdpPlugin) {
  // accelerate's examples/config_yaml_templates/fsdp.yaml, with a layer class.
  const AccelerateConfig c = parse_accelerate_config(R"(
distributed_type: FSDP
mixed_precision: 'bf16'
num_processes: 2
fsdp_config:
  fsdp_activation_checkpointing: false
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_backward_prefetch: BACKWARD_PRE
  fsdp_offload_params: true
  fsdp_sharding_strategy: 4
  fsdp_transformer_layer_cls_to_wrap: GPT2Block, LlamaDecoderLayer
)", "c.yaml");
  EXPECT_EQ(c.num_processes, 2);
  const Options expected = {{"plugin", "fsdp"},
                            {"fsdp.activation_checkpointing", "false"},
                            {"fsdp.auto_wrap_policy", "transformer_based_wrap"},
                            {"fsdp.backward_prefetch", "BACKWARD_PRE"},
                            {"fsdp.cpu_offload", "true"},
                            {"fsdp.sharding_strategy", "HYBRID_SHARD"},
                            {"fsdp.transformer_cls_names_to_wrap", "block"},
                            {"mixed-precision", "bf16"}};
  EXPECT_EQ(c.pairs(), expected);
}

TEST(AccelerateConfig, DeepSpeedMegatronAndFp8Sections) {
  const AccelerateConfig ds = parse_accelerate_config(R"(
compute_environment: LOCAL_MACHINE
distributed_type: DEEPSPEED
deepspeed_config:
  gradient_accumulation_steps: 2
  offload_optimizer_device: cpu
  zero3_init_flag: true
  zero_stage: 3
  deepspeed_multinode_launcher: standard
num_machines: 1
machine_rank: 0
main_training_function: main
rdzv_backend: static
same_network: true
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: false
)", "c.yaml");
  const Options ds_expected = {{"plugin", "deepspeed_zero"},
                               {"deepspeed_zero.gradient_accumulation_steps", "2"},
                               {"grad-accum", "2"},
                               {"deepspeed_zero.offload_optimizer_device", "cpu"},
                               {"deepspeed_zero.zero3_init_flag", "true"},
                               {"deepspeed_zero.zero_stage", "3"}};
  EXPECT_EQ(ds.pairs(), ds_expected);
  ASSERT_EQ(ds.notes.size(), 1u);
  EXPECT_NE(ds.notes[0].find("deepspeed_multinode_launcher"), std::string::npos);

  const AccelerateConfig megatron = parse_accelerate_config(R"(
distributed_type: MEGATRON_LM
megatron_lm_config:
  megatron_lm_gradient_clipping: 1.0
  megatron_lm_pp_degree: 2
  megatron_lm_num_micro_batches: 4
  megatron_lm_recompute_activations: true
  megatron_lm_sequence_parallelism: true
  megatron_lm_tp_degree: 2
  megatron_lm_use_distributed_optimizer: false
num_processes: 4
)", "c.yaml");
  // The micro-batches are the host's accumulation too (the plugin requires
  // them equal), and the clipping is the host's.
  const Options megatron_expected = {{"plugin", "megatron"},
                                     {"grad-clip", "1.0"},
                                     {"megatron.num_micro_batches", "4"},
                                     {"grad-accum", "4"},
                                     {"megatron.pp_degree", "2"},
                                     {"megatron.recompute_activations", "true"},
                                     {"megatron.sequence_parallelism", "true"},
                                     {"megatron.tp_degree", "2"},
                                     {"megatron.use_distributed_optimizer", "false"}};
  EXPECT_EQ(megatron.pairs(), megatron_expected);

  // accelerate's fp8.yaml, its comments and list included.
  const AccelerateConfig fp8 = parse_accelerate_config(R"(
distributed_type: "NO"
mixed_precision: "fp8"
fp8_config:
  backend: TE # Can be TE | MS-AMP
  amax_history_len: 1024
  fp8_format: E4M3
  interval: 1
  margin: 0
  override_linear_precision: [false, false, false]
  use_autocast_during_eval: false
  #opt_level: O1
)", "c.yaml");
  const Options fp8_expected = {{"plugin", "fp8"},
                                {"fp8.amax_history_len", "1024"},
                                {"fp8.backend", "te"},
                                {"fp8.fp8_format", "E4M3"},
                                {"fp8.interval", "1"},
                                {"fp8.margin", "0"},
                                {"fp8.override_linear_precision", "false,false,false"},
                                {"fp8.use_autocast_during_eval", "false"}};
  EXPECT_EQ(fp8.pairs(), fp8_expected);
}

TEST(AccelerateConfig, LaunchLevelKeys) {
  const AccelerateConfig c = parse_accelerate_config(R"(
distributed_type: MULTI_GPU
num_machines: 2
machine_rank: 1
num_processes: 8
main_process_ip: 10.0.0.1
main_process_port: 29500
gpu_ids: 0,1
debug: true
enable_cpu_affinity: true
mpirun_config:
  mpirun_hostfile: hosts
dynamo_config:
  dynamo_backend: "NO"
)", "c.yaml");
  EXPECT_EQ(c.num_machines, 2);
  EXPECT_EQ(c.machine_rank, 1);
  EXPECT_EQ(c.gpu_ids, "0,1");
  EXPECT_TRUE(c.debug);
  EXPECT_TRUE(c.cpu_affinity);
  EXPECT_EQ(c.hostfile, "hosts");
  EXPECT_EQ(c.pairs(), (Options{{"plugin", "ddp"}}));
  // issue 50 item 11: main_process_ip is read and used by nothing, and says
  // so as main_process_port does.
  ASSERT_EQ(c.notes.size(), 2u);
  EXPECT_EQ(c.notes[0].find("main_process_ip \"10.0.0.1\": mpirun starts every rank"), 0u) << c.notes[0];
  EXPECT_EQ(c.notes[1].find("main_process_port"), 0u) << c.notes[1];
}

TEST(AccelerateConfig, EveryKeyThatCannotBeHonouredIsOneLineNamingIt) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"distributed_type: XLA\n", "c.yaml: distributed_type \"XLA\" is not honoured"},
      {"num_processes: 2\n", "c.yaml: distributed_type is missing"},
      {"distributed_type: FSDP\nfsdp_config:\n  fsdp_bogus: 1\n", "c.yaml: \"fsdp_config.fsdp_bogus\" is not a key"},
      {"distributed_type: NO\nbogus: 1\n", "c.yaml: \"bogus\" is not a key"},
      {"distributed_type: NO\ntpu_name: x\n", "c.yaml: tpu_name is not honoured: there are no TPUs"},
      {"distributed_type: NO\ndowncast_bf16: true\n", "c.yaml: downcast_bf16 is not honoured"},
      {"distributed_type: NO\ncompute_environment: AMAZON_SAGEMAKER\n",
       "c.yaml: compute_environment AMAZON_SAGEMAKER is a SageMaker config"},
      {"distributed_type: NO\ndynamo_config:\n  dynamo_backend: INDUCTOR\n",
       "c.yaml: dynamo_config.dynamo_backend is not honoured"},
      {"distributed_type: NO\nmixed_precision: fp4\n", "c.yaml: mixed_precision must be no, fp16, bf16 or fp8"},
      {"distributed_type: NO\nnum_processes: 0\n", "c.yaml: num_processes must be a whole number from 1"},
      {"distributed_type: NO\nnum_processes: 2.5\n", "c.yaml: num_processes must be a whole number"},
      {"distributed_type: NO\nuse_cpu: maybe\n", "c.yaml: use_cpu must be true or false"},
      {"distributed_type: FSDP\nfsdp_config: 3\n", "c.yaml: fsdp_config must be a mapping"},
      {"distributed_type: NO\nnum_machines: 2\nmachine_rank: 2\n", "c.yaml: machine_rank must be a whole number from 0 to 1"},
      {"- a\n- b\n", "c.yaml: an accelerate config is a mapping of keys"},
      {"distributed_type: [NO\n", "c.yaml: not valid YAML: "},
      {"distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: \"FULL_SHARD\\n[ddp]\"\n",
       "c.yaml: fsdp_config.fsdp_sharding_strategy must be one line"},
  };
  for (const auto& [yaml, message] : cases) {
    const std::string line = refusal(yaml);
    EXPECT_EQ(line.find(message), 0u) << yaml << " -> " << line;
    EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  }
}

TEST(AccelerateConfig, DeepNestingAndHugeKeysStayOneBoundedLine) {
  const std::string deep = "distributed_type: NO\nx: " + std::string(100000, '[') + std::string(100000, ']') + "\n";
  const std::string line = refusal(deep);
  EXPECT_EQ(line.find("c.yaml: "), 0u) << line.substr(0, 200);
  EXPECT_LT(line.size(), 400u);
  const std::string huge = "distributed_type: NO\n" + std::string(100000, 'k') + ": 1\n";
  EXPECT_LT(refusal(huge).size(), 400u);
}

TEST(AccelerateConfig, TheOlderFp16KeyIsMixedPrecision) {
  EXPECT_EQ(parse_accelerate_config("distributed_type: NO\nfp16: true\n", "c.yaml").pairs(),
            (Options{{"mixed-precision", "fp16"}}));
  EXPECT_EQ(parse_accelerate_config("distributed_type: NO\nfp16: true\nmixed_precision: bf16\n", "c.yaml").pairs(),
            (Options{{"mixed-precision", "bf16"}}));
}

// issue 50 item 9: the file is read as PyYAML's safe_load reads it
// (accelerate's reader), for the subset accelerate writes.
TEST(AccelerateConfig, YamlIsReadAsPyYamlSafeLoadReadsIt) {
  // A key given twice: the last value wins (yaml-cpp's lookup found the first).
  const AccelerateConfig twice =
      parse_accelerate_config("distributed_type: NO\nnum_processes: 1\nnum_processes: 2\n", "c.yaml");
  EXPECT_EQ(twice.num_processes, 2);
  const AccelerateConfig nested = parse_accelerate_config(
      "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 1\n  fsdp_version: 2\n", "c.yaml");
  EXPECT_EQ(nested.pairs(), (Options{{"plugin", "fsdp"}, {"fsdp.fsdp_version", "2"}}));
  // A second document: safe_load refuses the stream.
  EXPECT_EQ(refusal("distributed_type: NO\n---\ndistributed_type: FSDP\n").find("c.yaml: holds more than one YAML document"),
            0u);
  // A ',' outside [ ] and { } (yaml-cpp's LoadAll looped on it without end;
  // found by accelerate_config_fuzz): PyYAML refuses it too.
  EXPECT_EQ(refusal("# c\n,fsdp_config:\n  fsdp_version: 1\n").find("c.yaml: holds more than one YAML document"), 0u);
  // A list where a scalar belongs: refused naming the key.
  EXPECT_EQ(refusal("distributed_type: NO\nnum_processes: [1, 2]\n"),
            "c.yaml: num_processes must be a plain value, got a list");
  EXPECT_EQ(refusal("distributed_type: [FSDP]\n"), "c.yaml: distributed_type must be a plain value, got a list");
  EXPECT_EQ(refusal("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: [FULL_SHARD]\n"),
            "c.yaml: fsdp_config.fsdp_sharding_strategy must be a plain value, got a list");
  // Variants of the class: a Python tag (safe_load refuses it), a merge key,
  // an empty file (safe_load gives None), a key that is not plain text.
  EXPECT_NE(refusal("distributed_type: !!python/name:os.system NO\n").find("is refused (PyYAML's safe_load"),
            std::string::npos);
  EXPECT_NE(refusal("base: &b {num_processes: 2}\n<<: *b\ndistributed_type: NO\n").find("merge keys"),
            std::string::npos);
  EXPECT_EQ(refusal(""), "c.yaml: an accelerate config is a mapping of keys at the top (the file is empty)");
  EXPECT_NE(refusal("? [a]\n: 1\ndistributed_type: NO\n").find("a key must be plain text"), std::string::npos);
  // Aliases nested ten deep each level: a million values from a few lines
  // (found by accelerate_config_fuzz), refused rather than expanded.
  std::string laughs = "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int level = 1; level <= 6; ++level) {
    const std::string below = "*l" + std::to_string(level - 1);
    laughs += "l" + std::to_string(level) + ": &l" + std::to_string(level) + " [" + below;
    for (int i = 1; i < 10; ++i) laughs += ", " + below;
    laughs += "]\n";
  }
  EXPECT_NE(refusal(laughs).find("expands to more than 100000 values"), std::string::npos) << refusal(laughs);
  // The same with a long scalar repeated: bounded by its text.
  std::string long_laughs = "s: &s " + std::string(1000, 'x') + "\nl0: &l0 [*s, *s, *s, *s, *s, *s, *s, *s, *s, *s]\n";
  for (int level = 1; level <= 3; ++level) {
    const std::string below = "*l" + std::to_string(level - 1);
    long_laughs += "l" + std::to_string(level) + ": &l" + std::to_string(level) + " [" + below;
    for (int i = 1; i < 10; ++i) long_laughs += ", " + below;
    long_laughs += "]\n";
  }
  EXPECT_NE(refusal(long_laughs).find("expands to more than 1 MiB of text"), std::string::npos)
      << refusal(long_laughs).substr(0, 200);
  // A NUL byte (yaml-cpp looped on it, allocating; found by
  // accelerate_config_fuzz) and other control characters are refused, as
  // PyYAML's reader refuses them.
  EXPECT_EQ(refusal(std::string(",p\0Fa", 5)),
            "c.yaml: holds the control character 0x00 at byte 2, which YAML (and PyYAML's safe_load) refuses");
  // Anchors and aliases read as PyYAML reads them.
  EXPECT_EQ(parse_accelerate_config("distributed_type: NO\nnum_machines: &n 2\nnum_processes: *n\n", "c.yaml")
                .num_processes,
            2);
}

// issue 50 item 12: accelerate's own files, in the shapes its questionnaire
// and docs write, run where Accel can honour them.
TEST(AccelerateConfig, WhatTheQuestionnaireWritesIsAccepted) {
  // `accelerate config` writes tpu_env: [] (and the other TPU keys at their
  // defaults) into every file.
  const AccelerateConfig c = parse_accelerate_config(R"(compute_environment: LOCAL_MACHINE
debug: false
distributed_type: MULTI_CPU
downcast_bf16: 'no'
enable_cpu_affinity: false
machine_rank: 0
main_training_function: main
mixed_precision: 'no'
num_machines: 1
num_processes: 2
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: true
)", "c.yaml");
  EXPECT_EQ(c.pairs(), (Options{{"plugin", "ddp"}, {"mixed-precision", "no"}, {"device", "cpu"}}));
  EXPECT_EQ(refusal("distributed_type: NO\ntpu_env: [A=1]\n"), "c.yaml: tpu_env is not honoured: there are no TPUs in Accel");
  // fsdp_ignored_modules: null is accelerate's default; a value is the fsdp option.
  EXPECT_EQ(parse_accelerate_config("distributed_type: FSDP\nfsdp_config:\n  fsdp_ignored_modules: null\n", "c.yaml")
                .pairs(),
            (Options{{"plugin", "fsdp"}}));
  EXPECT_EQ(parse_accelerate_config("distributed_type: FSDP\nfsdp_config:\n  fsdp_ignored_modules: head\n", "c.yaml")
                .pairs(),
            (Options{{"plugin", "fsdp"}, {"fsdp.ignored_modules", "head"}}));
  // megatron_lm_num_micro_batches alone: the host's accumulation follows.
  EXPECT_EQ(parse_accelerate_config("distributed_type: MEGATRON_LM\nmegatron_lm_config:\n"
                                    "  megatron_lm_num_micro_batches: 2\n",
                                    "c.yaml")
                .pairs(),
            (Options{{"plugin", "megatron"}, {"megatron.num_micro_batches", "2"}, {"grad-accum", "2"}}));
  // The fp8 keys the questionnaire writes (amax_history_length, ...) are
  // the launch flags' (amax_history_len, ...).
  EXPECT_EQ(parse_accelerate_config("distributed_type: NO\nmixed_precision: fp8\nfp8_config:\n  backend: MSAMP\n"
                                    "  optimization_level: O1\n  amax_history_length: 16\n",
                                    "c.yaml")
                .pairs(),
            (Options{{"plugin", "fp8"}, {"fp8.amax_history_len", "16"}, {"fp8.backend", "msamp"}, {"fp8.opt_level", "O1"}}));
}

TEST(AccelerateConfig, ParallelismConfigSizesMapOntoFsdpOrAreRefusedByName) {
  // accelerate's examples/torch_native_parallelism shape.
  const AccelerateConfig cp = parse_accelerate_config(R"(distributed_type: FSDP
fsdp_config:
  fsdp_version: 2
num_processes: 4
parallelism_config:
  parallelism_config_dp_replicate_size: 1
  parallelism_config_dp_shard_size: 2
  parallelism_config_tp_size: 1
  parallelism_config_cp_size: 2
  parallelism_config_cp_comm_strategy: alltoall
)", "c.yaml");
  EXPECT_EQ(cp.pairs(), (Options{{"plugin", "fsdp"}, {"fsdp.fsdp_version", "2"}, {"fsdp.cp_size", "2"},
                                 {"fsdp.cp_comm_type", "a2a"}}));
  const AccelerateConfig hsdp = parse_accelerate_config(
      "distributed_type: FSDP\nnum_processes: 4\nparallelism_config:\n  parallelism_config_dp_replicate_size: 2\n"
      "  parallelism_config_dp_shard_size: 2\n",
      "c.yaml");
  EXPECT_EQ(hsdp.pairs(), (Options{{"plugin", "fsdp"}, {"fsdp.sharding_strategy", "HYBRID_SHARD"},
                                   {"fsdp.hybrid_shard_group_size", "2"}}));
  const AccelerateConfig sp = parse_accelerate_config(
      "distributed_type: DEEPSPEED\nparallelism_config:\n  parallelism_config_sp_size: 2\n", "c.yaml");
  EXPECT_EQ(sp.pairs(), (Options{{"plugin", "deepspeed_zero"}, {"deepspeed_zero.sequence_parallel_size", "2"}}));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"distributed_type: FSDP\nparallelism_config:\n  parallelism_config_tp_size: 2\n",
       "c.yaml: parallelism_config.parallelism_config_tp_size is not honoured: fsdp has no tensor parallelism"},
      {"distributed_type: FSDP\nnum_processes: 2\nparallelism_config:\n  parallelism_config_dp_shard_size: 4\n",
       "c.yaml: parallelism_config's sizes make 4 rank(s)"},
      {"distributed_type: MULTI_GPU\nparallelism_config:\n  parallelism_config_cp_size: 2\n",
       "c.yaml: parallelism_config.parallelism_config_cp_size is not honoured"},
      {"distributed_type: FSDP\nparallelism_config:\n  parallelism_config_cp_backend: other\n",
       "c.yaml: parallelism_config.parallelism_config_cp_backend is not honoured"},
  };
  for (const auto& [yaml, message] : cases) EXPECT_EQ(refusal(yaml).find(message), 0u) << refusal(yaml);
}

TEST(AccelerateConfig, ASageMakerFileIsRefusedAsSageMaker) {
  // What `accelerate config` writes for AMAZON_SAGEMAKER.
  EXPECT_EQ(refusal("base_job_name: accelerate-sagemaker-1\ncompute_environment: AMAZON_SAGEMAKER\n"
                    "distributed_type: 'NO'\nec2_instance_type: ml.p3.2xlarge\niam_role_name: role\n"),
            "c.yaml: compute_environment AMAZON_SAGEMAKER is a SageMaker config: Accel runs on the machines it is "
            "started on (LOCAL_MACHINE)");
  // Without compute_environment (accelerate would read it as a cluster file
  // and name the key as unknown): named as SageMaker's all the same.
  EXPECT_EQ(refusal("distributed_type: NO\nec2_instance_type: ml.p3.2xlarge\n").find(
                "c.yaml: ec2_instance_type is a SageMaker key"),
            0u);
}

TEST(AccelerateConfig, YamlIsTheFileNameNotItsText) {
  EXPECT_TRUE(is_yaml_config("a/default_config.yaml"));
  EXPECT_TRUE(is_yaml_config("c.YML"));
  EXPECT_FALSE(is_yaml_config("run.cfg"));
  EXPECT_FALSE(is_yaml_config("yaml"));
}

}  // namespace
}  // namespace accel::cli
