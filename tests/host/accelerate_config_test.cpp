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
  EXPECT_EQ(c.options, expected);
  EXPECT_EQ(c.to_ini(),
            "plugin = fsdp\nmixed-precision = bf16\n[fsdp]\nactivation_checkpointing = false\nauto_wrap_policy = "
            "transformer_based_wrap\nbackward_prefetch = BACKWARD_PRE\ncpu_offload = true\nsharding_strategy = "
            "HYBRID_SHARD\ntransformer_cls_names_to_wrap = block\n");
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
                               {"deepspeed_zero.offload_optimizer_device", "cpu"},
                               {"deepspeed_zero.zero3_init_flag", "true"},
                               {"deepspeed_zero.zero_stage", "3"},
                               {"grad-accum", "2"}};
  EXPECT_EQ(ds.options, ds_expected);
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
  EXPECT_EQ(megatron.options.front(), (std::pair<std::string, std::string>{"plugin", "megatron"}));
  EXPECT_EQ(megatron.options.size(), 8u);
  EXPECT_EQ(megatron.options.back(), (std::pair<std::string, std::string>{"grad-clip", "1.0"}));

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
  EXPECT_EQ(fp8.options, fp8_expected);
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
  EXPECT_EQ(c.main_process_ip, "10.0.0.1");
  EXPECT_EQ(c.gpu_ids, "0,1");
  EXPECT_TRUE(c.debug);
  EXPECT_TRUE(c.cpu_affinity);
  EXPECT_EQ(c.hostfile, "hosts");
  EXPECT_EQ(c.options, (Options{{"plugin", "ddp"}}));
  EXPECT_EQ(c.notes.size(), 1u);  // main_process_port
}

TEST(AccelerateConfig, EveryKeyThatCannotBeHonouredIsOneLineNamingIt) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"distributed_type: XLA\n", "c.yaml: distributed_type \"XLA\" is not honoured"},
      {"num_processes: 2\n", "c.yaml: distributed_type is missing"},
      {"distributed_type: FSDP\nfsdp_config:\n  fsdp_bogus: 1\n", "c.yaml: \"fsdp_config.fsdp_bogus\" is not a key"},
      {"distributed_type: NO\nbogus: 1\n", "c.yaml: \"bogus\" is not a key"},
      {"distributed_type: NO\ntpu_name: x\n", "c.yaml: tpu_name is not honoured: there are no TPUs"},
      {"distributed_type: NO\ndowncast_bf16: true\n", "c.yaml: downcast_bf16 is not honoured"},
      {"distributed_type: NO\ncompute_environment: AMAZON_SAGEMAKER\n", "c.yaml: compute_environment"},
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
  EXPECT_EQ(parse_accelerate_config("distributed_type: NO\nfp16: true\n", "c.yaml").options,
            (Options{{"mixed-precision", "fp16"}}));
  EXPECT_EQ(parse_accelerate_config("distributed_type: NO\nfp16: true\nmixed_precision: bf16\n", "c.yaml").options,
            (Options{{"mixed-precision", "bf16"}}));
}

TEST(AccelerateConfig, YamlIsTheFileNameNotItsText) {
  EXPECT_TRUE(is_yaml_config("a/default_config.yaml"));
  EXPECT_TRUE(is_yaml_config("c.YML"));
  EXPECT_FALSE(is_yaml_config("run.cfg"));
  EXPECT_FALSE(is_yaml_config("yaml"));
}

}  // namespace
}  // namespace accel::cli
