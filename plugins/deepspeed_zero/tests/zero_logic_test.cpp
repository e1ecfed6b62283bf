// zero_logic_test.cpp — deepspeed_zero's pure logic: the DeepSpeed config as
// DeepSpeed and Accelerate read it (batch rule, "auto", contradictions,
// refusals, unknown keys), DeepSpeed's learning-rate schedules, and what
// each stage partitions. The collectives run under python.deepspeed_zero.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../zero_config.h"
#include "../zero_plan.h"

namespace accel::zero {
namespace {

HostSettings host(int world = 4) {
  HostSettings h;
  h.world_size = world;
  h.batch_size = 16;
  h.grad_accum = 2;
  h.max_grad_norm = 1.0;
  h.lr = 3e-3;
  h.weight_decay = 0.1;
  h.warmup_steps = 5;
  h.decay_steps = 20;
  return h;
}

ZeroConfig resolve(const std::string& text, const HostSettings& h = host(), const PluginFields& f = {}) {
  return resolve_config(f, h, text, "hf_ds_config ds.json");
}

// The one line of the refusal, or "" when it was accepted.
std::string refusal(const std::string& text, const HostSettings& h = host(), const PluginFields& f = {}) {
  try {
    resolve(text, h, f);
  } catch (const sdk::Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    return what;
  }
  return "";
}

// ------------------------------------------------------------------ batch

TEST(BatchRule, AutoIsFilledFromTheHost) {
  const ZeroConfig c = resolve(R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                                   "gradient_accumulation_steps": "auto"})");
  EXPECT_EQ(c.train_batch_size, 16);
  EXPECT_EQ(c.gradient_accumulation_steps, 2);
  EXPECT_EQ(c.micro_batch_per_gpu, 2);  // 16 / (2 x 4)
}

TEST(BatchRule, TheMissingOneIsDerivedAsDeepSpeedDoes) {
  EXPECT_EQ(resolve(R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2})").gradient_accumulation_steps, 2);
  EXPECT_EQ(resolve(R"({"train_batch_size": 16, "gradient_accumulation_steps": 2})").micro_batch_per_gpu, 2);
  EXPECT_EQ(resolve(R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2})").train_batch_size, 16);
}

TEST(BatchRule, InconsistentTripleIsRefusedWithDeepSpeedsArithmetic) {
  const std::string why =
      refusal(R"({"train_batch_size": 12, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2})");
  EXPECT_NE(why.find("train_batch_size 12 is not train_micro_batch_size_per_gpu 2 x gradient_accumulation_steps 2 "
                     "x world size 4"),
            std::string::npos)
      << why;
}

TEST(BatchRule, ConsistentButNotTheHostsIsRefusedNamingBoth) {
  // 32 = 4 x 2 x 4 is DeepSpeed-consistent, but the host runs --batch-size 16.
  const std::string why =
      refusal(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2})");
  EXPECT_NE(why.find("train_micro_batch_size_per_gpu 4 contradicts accel-host's --batch-size 16 / (--grad-accum 2 x "
                     "4 ranks) = 2"),
            std::string::npos)
      << why;
  // Absent, gradient_accumulation_steps is DeepSpeed's 1: not the host's 2.
  const std::string gas = refusal(R"({"train_micro_batch_size_per_gpu": "auto"})");
  EXPECT_NE(gas.find("gradient_accumulation_steps 1 contradicts accel-host's --grad-accum 2"), std::string::npos)
      << gas;
}

// ------------------------------------------------------------ contradictions

TEST(Contradictions, ConfigAgainstHostFlagsAndPluginOptions) {
  HostSettings clip_given = host();
  clip_given.max_grad_norm_given = true;
  EXPECT_NE(refusal(R"({"gradient_clipping": 0.5})", clip_given)
                .find("gradient_clipping 0.5 contradicts accel-host's --grad-clip 1"),
            std::string::npos);
  EXPECT_NE(
      refusal(R"({"bf16": {"enabled": true}})").find("bf16.enabled true contradicts accel-host's --mixed-precision no"),
      std::string::npos);
  PluginFields f;
  f.zero_stage = 3;
  EXPECT_NE(refusal(R"({"zero_optimization": {"stage": 2}})", host(), f)
                .find("zero_optimization.stage 2 contradicts --deepspeed_zero.zero_stage 3"),
            std::string::npos);
  EXPECT_EQ(resolve(R"({"zero_optimization": {"stage": 3}, "gradient_accumulation_steps": 2})", host(), f).stage, 3);
  EXPECT_EQ(resolve(R"({"bf16": {"enabled": "auto"}, "gradient_accumulation_steps": "auto"})").stage, 0);
  EXPECT_EQ(resolve("").stage, 2);  // DeepSpeedPlugin's default
}

// ---------------------------------------------------------------- refusals

TEST(Refusals, BadInputsAreOneLineNamingTheKey) {
  EXPECT_NE(refusal("{\"zero_optimization\": {\"stage\": 2,}").find("hf_ds_config ds.json: not valid JSON"),
            std::string::npos);
  EXPECT_NE(refusal("[1, 2]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(refusal(R"({"zero_optimization": {"stage": 4}})")
                .find("zero_optimization.stage 4: ZeRO stages are 0, 1, 2 and 3"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}})")
                .find("offload_param.device cpu needs zero stage 3 (stage is 2)"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"scheduler": {"type": "OneCycle", "params": {}}})")
                .find("scheduler.type OneCycle: unknown scheduler"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"optimizer": {"type": "Lamb", "params": {}}})").find("optimizer.type Lamb"), std::string::npos);
  EXPECT_NE(refusal(R"({"optimizer": {"type": "AdamW", "params": {"amsgrad": true}}})").find("AMSGrad"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"train_batch_size": "sixteen"})").find("\"train_batch_size\" must be a number, got \"sixteen\""),
            std::string::npos);
  EXPECT_NE(refusal(R"({"train_batch_size": 16.5})").find("\"train_batch_size\" must be a whole number, got 16.5"),
            std::string::npos);
  PluginFields moe;
  moe.transformer_moe_cls_names = "MixtralSparseMoeBlock,,Other";
  EXPECT_NE(refusal("", host(), moe).find("an empty class name"), std::string::npos);
  PluginFields msamp;
  msamp.enable_msamp = true;
  EXPECT_NE(refusal("", host(), msamp).find("--plugin fp8"), std::string::npos);
}

TEST(Refusals, UnknownKeysAreCollectedForOneWarning) {
  const ZeroConfig c =
      resolve(R"({"zero_optimization": {"stage": 1, "mystery_knob": 3}, "tensorboard": {"enabled": true},
                                   "steps_per_print": 5, "gradient_accumulation_steps": 2})");
  EXPECT_EQ(c.unknown_keys, (std::vector<std::string>{"tensorboard", "zero_optimization.mystery_knob"}));
  EXPECT_EQ(c.steps_per_print, 5);
}

// ------------------------------------------- issue 30: reading by the rule

// A value nested far deeper than any config: refused while parsing. Before,
// the refusal's dump() of the value recursed once per level and overflowed
// the stack, beyond any exception guard.
TEST(Issue30, DeeplyNestedValueIsRefusedNotAStackOverflow) {
  const size_t depth = 200000;
  const std::string text = "{\"gradient_clipping\": " + std::string(depth, '[') + std::string(depth, ']') + "}";
  const std::string why = refusal(text);
  EXPECT_NE(why.find("hf_ds_config ds.json: nests arrays or objects deeper than 64 levels"), std::string::npos) << why;
}

// Messages quote input values bounded (describe()), never whole.
TEST(Issue30, MessagesNeverRepeatAWholeInputValue) {
  const std::string long_text(5000, 'x');
  for (const std::string& text :
       {R"({"optimizer": {"type": ")" + long_text + R"("}})", R"({"gradient_clipping": [)" + std::string(3000, '1') + "]}",
        R"({"steps_per_print": ")" + long_text + R"("})", R"({"zero_optimization": {"stage": ")" + long_text,
        R"({"zero_optimization": {"offload_optimizer": {"device": ")" + long_text + R"("}}})"}) {
    const std::string why = refusal(text);
    EXPECT_FALSE(why.empty());
    EXPECT_LT(why.size(), 300u) << why.substr(0, 300);
  }
}

// Found by ds_config_fuzz: a JSON string holds "\n", and a short one was
// quoted as written, so the refusal of {"warmup_type": "li\near"} was two
// lines. Text in messages is now escaped unless plain.
TEST(Issue30, FuzzFoundANewlineInAQuotedValueMadeTwoLines) {
  const std::string why =
      refusal(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_type": "li\near"}}})");  // refusal() checks one line
  EXPECT_NE(why.find(R"(scheduler.params.warmup_type "li\near": log or linear)"), std::string::npos) << why;
  EXPECT_NE(refusal(R"({"optimizer": {"type": "Ada\u0000m"}})").find(R"("Ada\u0000m")"), std::string::npos);
  EXPECT_EQ(shown_text("cpu"), "cpu");
  EXPECT_EQ(shown_text("a\tb"), R"("a\tb")");
}

// A section that is not an object, or "auto" where nothing fills it, read as
// absent before: {"zero_optimization": 3} ran ZeRO stage 0 without a word.
TEST(Issue30, SectionsMustBeObjectsAndAutoOnlyWhereAccelerateFillsIt) {
  EXPECT_NE(refusal(R"({"zero_optimization": 3, "bf16": true})")
                .find("hf_ds_config ds.json: \"zero_optimization\" must be a JSON object, got 3"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"bf16": true})").find("\"bf16\" must be a JSON object, got true"), std::string::npos);
  for (const char* section : {"fp16", "optimizer", "scheduler", "aio", "amp"}) {
    const std::string why = refusal(std::string("{\"") + section + "\": [1]}");
    EXPECT_NE(why.find(std::string("\"") + section + "\" must be a JSON object, got an array of 1 element(s)"),
              std::string::npos)
        << why;
  }
  EXPECT_NE(refusal(R"({"optimizer": {"type": "AdamW", "params": 0.1}})").find("\"optimizer.params\" must be a JSON object"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"zero_optimization": {"stage": 3, "offload_param": "cpu"}})")
                .find("\"zero_optimization.offload_param\" must be a JSON object"),
            std::string::npos);
  // "auto" where Accelerate fills nothing: DeepSpeed would reject it.
  for (const char* key : {R"({"steps_per_print": "auto"})", R"({"fp16": {"loss_scale_window": "auto"}})",
                          R"({"zero_optimization": {"stage3_max_live_parameters": "auto"}})",
                          R"({"zero_optimization": {"overlap_comm": "auto"}})",
                          R"({"optimizer": {"type": "auto"}})"}) {
    EXPECT_NE(refusal(key).find("is \"auto\", which nothing fills"), std::string::npos) << key;
  }
  // The stage's "auto" is Accelerate's to fill, from DeepSpeedPlugin's
  // zero_stage (2 unless given), not DeepSpeed's absent-key default of 0.
  const ZeroConfig filled = resolve(R"({"zero_optimization": {"stage": "auto"}, "gradient_accumulation_steps": 2})");
  EXPECT_EQ(filled.stage, 2);
  ASSERT_FALSE(filled.notes.empty());
  EXPECT_NE(filled.notes[0].find("zero_optimization.stage \"auto\": stage 2"), std::string::npos);
  PluginFields one;
  one.zero_stage = 1;
  EXPECT_EQ(resolve(R"({"zero_optimization": {"stage": "auto"}, "gradient_accumulation_steps": 2})", host(), one).stage,
            1);
  // Python writes big counts as 1e9: whole numbers, accepted; fractions not.
  const ZeroConfig big = resolve(R"({"zero_optimization": {"stage": 3, "stage3_max_live_parameters": 1e9,
      "sub_group_size": 1e9}, "gradient_accumulation_steps": 2})");
  EXPECT_EQ(big.max_live_parameters, 1000000000);
  EXPECT_NE(refusal(R"({"zero_optimization": {"stage3_max_reuse_distance": 1.5}})").find("must be a whole number"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"zero_optimization": {"overlap_comm": 1}})")
                .find("\"zero_optimization.overlap_comm\" must be true or false, got 1"),
            std::string::npos);
}

// --deepspeed_zero.gradient_clipping was accepted and never used, and giving
// it switched off the check of the config's value against --grad-clip.
TEST(Issue30, GradientClippingGivenAnywhereIsTheRunsAndGivenValuesAgree) {
  PluginFields clip;
  clip.gradient_clipping = 0.25;
  const std::string batch = R"("gradient_accumulation_steps": 2)";
  EXPECT_DOUBLE_EQ(resolve("{" + batch + "}", host(), clip).gradient_clipping, 0.25);
  EXPECT_DOUBLE_EQ(resolve("", host(), clip).gradient_clipping, 0.25);
  EXPECT_DOUBLE_EQ(resolve(R"({"gradient_clipping": 0.5, )" + batch + "}").gradient_clipping, 0.5);
  EXPECT_DOUBLE_EQ(resolve(R"({"gradient_clipping": "auto", )" + batch + "}", host(), clip).gradient_clipping, 0.25);
  EXPECT_DOUBLE_EQ(resolve("{" + batch + "}").gradient_clipping, 1.0);  // --grad-clip's
  EXPECT_DOUBLE_EQ(resolve(R"({"gradient_clipping": 0, )" + batch + "}").gradient_clipping, 0.0);
  EXPECT_NE(refusal(R"({"gradient_clipping": 0.5})", host(), clip)
                .find("gradient_clipping 0.5 contradicts --deepspeed_zero.gradient_clipping 0.25"),
            std::string::npos);
  HostSettings given = host();
  given.max_grad_norm_given = true;
  given.max_grad_norm = 2.0;
  EXPECT_NE(refusal("{" + batch + "}", given, clip)
                .find("--deepspeed_zero.gradient_clipping 0.25 contradicts accel-host's --grad-clip 2"),
            std::string::npos);
  clip.gradient_clipping = 2.0;
  EXPECT_DOUBLE_EQ(resolve("{" + batch + "}", given, clip).gradient_clipping, 2.0);
}

// fp16's dynamic-scale keys were understood and not honoured (the scale
// stayed 65536): each must now agree with the host scaler's flag.
TEST(Issue30, LossScaleKeysAgreeWithTheHostsScaler) {
  HostSettings fp16 = host();
  fp16.mixed_precision = "fp16";
  const std::string batch = R"("gradient_accumulation_steps": 2)";
  EXPECT_NE(refusal(R"({"fp16": {"enabled": true, "initial_scale_power": 12}})", fp16)
                .find("fp16.initial_scale_power 12 (a scale of 4096) contradicts accel-host's --grad_scaler.init_scale "
                      "65536 (give --grad_scaler.init_scale 4096"),
            std::string::npos)
      << refusal(R"({"fp16": {"enabled": true, "initial_scale_power": 12}})", fp16);
  EXPECT_NE(refusal(R"({"fp16": {"loss_scale_window": 1000}})", fp16)
                .find("fp16.loss_scale_window 1000 contradicts accel-host's --grad_scaler.growth_interval 2000 (give "
                      "--grad_scaler.growth_interval 1000"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"fp16": {"hysteresis": 2}})", fp16).find("--grad_scaler.hysteresis 1 (give --grad_scaler.hysteresis 2"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"fp16": {"min_loss_scale": 1}})", fp16).find("--grad_scaler.min_scale 0 (give --grad_scaler.min_scale 1"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"fp16": {"consecutive_hysteresis": true}})", fp16).find("consecutive_hysteresis true: not served"),
            std::string::npos);
  // Accelerate's published fp16 section, with the flags that say the same.
  fp16.loss_scale_init = 4096;
  fp16.loss_scale_growth_interval = 1000;
  fp16.loss_scale_hysteresis = 2;
  fp16.loss_scale_min = 1;
  EXPECT_NO_THROW(resolve(R"({"fp16": {"enabled": true, "loss_scale": 0, "loss_scale_window": 1000,
      "initial_scale_power": 12, "hysteresis": 2, "min_loss_scale": 1}, )" + batch + "}",
                          fp16));
  // Without fp16 the keys are read (types checked) and not used.
  EXPECT_NO_THROW(resolve(R"({"fp16": {"enabled": false, "initial_scale_power": 12}, )" + batch + "}"));
  EXPECT_NE(refusal(R"({"fp16": {"enabled": false, "initial_scale_power": "12"}})").find("must be a number"),
            std::string::npos);
}

// -------------------------------------------------------- optimizer, offload

TEST(Optimizer, ConfigValuesReplaceTheHostsAndAutoKeepsThem) {
  const ZeroConfig c = resolve(R"({"optimizer": {"type": "AdamW",
      "params": {"lr": "auto", "betas": [0.8, 0.99], "eps": 1e-6, "weight_decay": "auto"}},
      "gradient_accumulation_steps": "auto"})");
  EXPECT_TRUE(c.optimizer.from_config);
  EXPECT_FALSE(c.optimizer.lr.has_value());
  EXPECT_DOUBLE_EQ(*c.optimizer.beta1, 0.8);
  EXPECT_DOUBLE_EQ(*c.optimizer.beta2, 0.99);
  EXPECT_DOUBLE_EQ(*c.optimizer.eps, 1e-6);
  ASSERT_EQ(c.notes.size(), 1u);
  EXPECT_NE(c.notes[0].find("replace accel-host's optimizer flags"), std::string::npos);
}

TEST(Offload, CpuOffloadPutsThePartitionsInHostMemory) {
  const ZeroConfig c = resolve(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu",
                                   "pin_memory": true}}, "gradient_accumulation_steps": "auto"})");
  EXPECT_EQ(c.offload_optimizer, OffloadDevice::cpu);
  EXPECT_TRUE(c.cpu_offload);
  EXPECT_TRUE(c.unknown_keys.empty());
}

// --------------------------------------------------------------- schedules

TEST(Schedules, DeepSpeedsWarmupAndDecay) {
  Schedule s;
  s.kind = ScheduleKind::warmup_decay_lr;
  s.warmup_min_lr = 0.0;
  s.warmup_max_lr = 1.0;
  s.warmup_num_steps = 10;
  s.total_num_steps = 20;
  s.warmup_type = WarmupType::linear;
  EXPECT_DOUBLE_EQ(schedule_lr(s, 0, 0.0), 0.0);
  EXPECT_DOUBLE_EQ(schedule_lr(s, 5, 0.0), 0.5);
  EXPECT_DOUBLE_EQ(schedule_lr(s, 10, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(schedule_lr(s, 15, 0.0), 0.5);
  EXPECT_DOUBLE_EQ(schedule_lr(s, 25, 0.0), 0.0);
  s.kind = ScheduleKind::warmup_lr;
  s.warmup_type = WarmupType::log;
  EXPECT_DOUBLE_EQ(schedule_lr(s, 0, 0.0), 0.0);
  EXPECT_NEAR(schedule_lr(s, 4, 0.0), std::log(5.0) / std::log(10.0), 1e-12);
  EXPECT_DOUBLE_EQ(schedule_lr(s, 30, 0.0), 1.0);
  s.kind = ScheduleKind::warmup_cosine_lr;
  s.cos_min_ratio = 0.0;
  EXPECT_NEAR(schedule_lr(s, 19, 2.0), 0.0, 1e-12);  // the cosine reaches its floor at total_num_steps
  EXPECT_NEAR(schedule_lr(s, 14, 2.0), 2.0 * (1.0 + std::cos(M_PI * 5.0 / 10.0)) / 2.0, 1e-12);
}

TEST(Schedules, AutoParamsComeFromTheHostsSchedule) {
  const ZeroConfig c = resolve(R"({"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto",
      "warmup_max_lr": "auto", "warmup_num_steps": "auto", "total_num_steps": "auto"}},
      "gradient_accumulation_steps": "auto"})");
  EXPECT_EQ(c.schedule.kind, ScheduleKind::warmup_decay_lr);
  EXPECT_DOUBLE_EQ(c.schedule.warmup_max_lr, 3e-3);
  EXPECT_EQ(c.schedule.warmup_num_steps, 5);
  EXPECT_EQ(c.schedule.total_num_steps, 20);
}

// ------------------------------------------------------------------- plans

std::vector<sharding::UnitLayout> gpt(int64_t block_numel) {
  std::vector<sharding::UnitLayout> units(4);
  for (int32_t u = 0; u < 4; ++u) {
    units[static_cast<size_t>(u)].index = u;
    units[static_cast<size_t>(u)].numel = block_numel;
    units[static_cast<size_t>(u)].kind = ACCEL_UNIT_BLOCK;
  }
  units[0].kind = ACCEL_UNIT_EMBEDDING;
  units[0].numel = 1000;
  sharding::ParamLayout wte;
  wte.name = "wte";
  wte.role = ACCEL_PARAM_EMBEDDING;
  wte.numel = 1000;
  wte.global_shape = wte.local_shape = {100, 10};
  units[0].params.push_back(wte);
  units[3].kind = ACCEL_UNIT_HEAD;
  units[3].numel = 20;
  units[3].tied_units = {0};
  return units;
}

TEST(Plans, MoeClassNamesMustBeTheModelsMixtureOfExpertsBlocks) {
  auto units = gpt(500);
  const std::vector<std::string> mixtral = {"MixtralSparseMoeBlock"};
  auto refusal = [&](const std::vector<std::string>& names) {
    try {
      moe_leaf_units(units, names);
    } catch (const sdk::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(refusal(mixtral).find("the model has no mixture-of-experts blocks"), std::string::npos);
  sharding::ParamLayout experts;
  experts.name = "layers.0.mlp.experts.down_proj";
  experts.role = ACCEL_PARAM_EXPERTS;
  units[2].params.push_back(experts);
  EXPECT_EQ(moe_leaf_units(units, mixtral), std::vector<int32_t>{2});
  EXPECT_NE(refusal({"MixtralSparseMoeBlock", "Qwen2MoeSparseMoeBlock"}).find("its mixture-of-experts blocks are "
                                                                            "MixtralSparseMoeBlock"),
            std::string::npos);
  // Issue 50 (20): a block with a shared expert is Qwen2-MoE's class, which
  // the DeepSpeed page names; Mixtral's is then the one refused.
  sharding::ParamLayout shared;
  shared.name = "layers.0.mlp.shared_expert.gate_proj.weight";
  shared.role = ACCEL_PARAM_LINEAR_WEIGHT;
  units[2].params.push_back(shared);
  EXPECT_EQ(moe_leaf_units(units, {"Qwen2MoeSparseMoeBlock"}), std::vector<int32_t>{2});
  EXPECT_NE(refusal(mixtral).find("its mixture-of-experts blocks are Qwen2MoeSparseMoeBlock"), std::string::npos);
}

TEST(Plans, EachStagePartitionsWhatDeepSpeedDoes) {
  const auto units = gpt(500);
  EXPECT_TRUE(plan_partitions(units, 0, 0, 0).groups.empty());
  const sharding::GatherPlan two = plan_partitions(units, 2, 0, 0);
  ASSERT_EQ(two.groups.size(), 3u);
  EXPECT_EQ(two.groups[0].units, (std::vector<int32_t>{0, 3}));  // tied: one group
  EXPECT_EQ(two.group_of, (std::vector<int32_t>{0, 1, 2, 0}));
  // Stage 3: blocks of 500 under a persistence threshold of 600 stay whole;
  // the embedding group (1020) is partitioned.
  const sharding::GatherPlan three = plan_partitions(units, 3, 600, 0);
  EXPECT_EQ(three.group_of, (std::vector<int32_t>{0, -1, -1, 0}));
  // Reuse distance: after block.1 come block.2 (500) and the head (20,
  // partitioned with the embedding): 520; after block.2 only the head: 20.
  const sharding::GatherPlan reuse = plan_partitions(units, 3, 0, 510);
  EXPECT_FALSE(reuse.groups[1].keep_until_backward);
  EXPECT_TRUE(reuse.groups[2].keep_until_backward);
  EXPECT_TRUE(reuse.groups[0].keep_until_backward);  // ends at the last unit: backward starts there
  EXPECT_EQ(hidden_size(units), 10);
}

}  // namespace
}  // namespace accel::zero
