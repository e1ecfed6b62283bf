// deepspeed_zero — ZeRO stages 0–3 (DeepSpeedPlugin) on the sharding
// machinery fsdp uses too (plugins/sharding): stage 0 all-reduces gradients
// and steps replicated AdamW state; stage 1 partitions the fp32 master
// weights and AdamW moments over the data-parallel ranks — each rank
// reduce-scatters the host's accumulated gradients into its partition once
// per step, steps it, and the updated partitions are all-gathered into the
// host's parameters; stage 2 also takes the gradients over, reduce-scattered
// into the partition per micro-batch and released right after each unit's
// backward; stage 3 also partitions the parameters, gathered around each
// unit's use (prefetched within stage3_prefetch_bucket_size, at most
// stage3_max_live_parameters alive, kept through backward within
// stage3_max_reuse_distance, small units persistent).
//
// This file is the plugin's public face — descriptor, the DeepSpeedPlugin
// option schema, hooks — and wires the parts: zero_config (the fields and
// the JSON config), zero_plan (what each stage partitions), and the shared
// machinery. Every option is documented in plugins/deepspeed_zero/README.md.
// Built with the SDK against the ABI headers alone. Hooks run on the host's
// loop thread only.
#include <accel/sdk/sdk.hpp>

#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "sharding/context_parallel.h"
#include "sharding/expert_slices.h"
#include "sharding/machinery.h"
#include "sharding/model_layout.h"
#include "zero_config.h"
#include "zero_plan.h"

namespace accel::zero {
namespace {

using sdk::Error;
using sharding::UnitLayout;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

class DeepSpeedZero final : public sdk::Plugin {
 public:
  static constexpr sdk::PluginInfo info{
      "deepspeed_zero",
      "1.0.0",
      "ZeRO stages 0-3: partitioned optimizer state, gradients and parameters (DeepSpeedPlugin)",
      ACCEL_PLUGIN_PARALLEL,
      sharding::kShardingCapabilities,
      "ddp,fsdp,megatron"};

  static constexpr sdk::Option options[] = {
      {"hf_ds_config", ACCEL_OPTION_STRING, nullptr,
       "path to a DeepSpeed JSON config, read as DeepSpeed reads it (\"auto\" filled from accel-host's settings)"},
      {"gradient_accumulation_steps", ACCEL_OPTION_INT, "1",
       "when given: must agree with accel-host's --grad-accum (the host runs the micro-batches) and the config's",
       nullptr, "1", "1048576"},
      {"gradient_clipping", ACCEL_OPTION_DOUBLE, "1.0",
       "when given: the max gradient norm the run clips to (0: none), in place of accel-host's --grad-clip; must "
       "agree with the config's gradient_clipping and with --grad-clip when those are given",
       nullptr, "0"},
      {"zero_stage", ACCEL_OPTION_INT, "2",
       "0: data parallel; 1: + optimizer state partitioned; 2: + gradients; "
       "3: + parameters",
       nullptr, "0", "3"},
      {"is_train_batch_min", ACCEL_OPTION_BOOL, "true",
       "accepted: with one data loader the train batch size is the host's --batch-size either way"},
      {"offload_optimizer_device", ACCEL_OPTION_ENUM, "none",
       "cpu: fp32 partitions and AdamW state in pinned host memory, stepped on the host (stages 1-3)", "none|cpu|nvme"},
      {"offload_param_device", ACCEL_OPTION_ENUM, "none",
       "stage 3: cpu: fp32 parameter partitions in pinned host memory; nvme: in a swap file under "
       "offload_param_nvme_path, beside their AdamW moments (ZeRO-Infinity)",
       "none|cpu|nvme"},
      {"offload_optimizer_nvme_path", ACCEL_OPTION_STRING, nullptr, "directory for nvme optimizer offload"},
      {"offload_param_nvme_path", ACCEL_OPTION_STRING, nullptr, "directory for nvme parameter offload"},
      {"zero3_init_flag", ACCEL_OPTION_BOOL, "true",
       "stage 3: each rank initialises only its partitions (its slice of the seed or of --init-from's files); "
       "false: each unit whole, one at a time, then cut"},
      {"zero3_save_16bit_model", ACCEL_OPTION_BOOL, "false",
       "stage 3: each checkpoint also holds model_16bit.safetensors, every parameter whole in fp16 (--mixed-precision "
       "fp16) or bf16, written by rank 0"},
      {"transformer_moe_cls_names", ACCEL_OPTION_STRING, nullptr,
       "mixture-of-experts block classes, comma-separated: MixtralSparseMoeBlock (the moe models' blocks; ZeRO-3 "
       "gathers each whole before its forward)"},
      {"enable_msamp", ACCEL_OPTION_BOOL, "false", "MS-AMP FP8 (refused: use --plugin fp8)"},
      {"msamp_opt_level", ACCEL_OPTION_ENUM, "O1", "MS-AMP level (refused when given, with enable_msamp)", "O1|O2"},
      {"sequence_parallel_size", ACCEL_OPTION_INT, "1",
       "DeepSpeed's sequence_parallel_size (Ulysses): ranks each sequence is split over; the partitions span them, "
       "and the data-parallel size of the batch keys is the world over it",
       nullptr, "1", "2147483647"},
      ACCEL_CONTEXT_PARALLEL_OPTIONS("a2a"),
      {"ep_size", ACCEL_OPTION_INT, "1",
       "DeepSpeed-MoE's ep_size (deepspeed.moe.layer.MoE(ep_size=...)): ranks each mixture-of-experts layer's "
       "experts are split over, tokens exchanged by all_to_all_v (a divisor of the world size); the blocks holding "
       "experts are partitioned over the expert-data-parallel group (the world / ep_size ranks holding the same "
       "experts), the other units over the data group, as the stage says",
       nullptr, "1", "2147483647"},
  };

  explicit DeepSpeedZero(const sdk::Services& s)
      : Plugin(s),
        config_(read_config(s)),
        cp_(s, "sequence_parallel_size", s.world_size()),
        host_max_grad_norm_(s.option<double>("train.max_grad_norm")),
        ep_(s.option<int64_t>("ep_size")),
        ops_(s) {
    if (ep_ > 1 && s.world_size() % ep_ != 0) {
      throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                  sdk::format("ep_size %lld does not divide the world size %d (expert groups are made of data ranks)",
                              static_cast<long long>(ep_), s.world_size()));
    }
    if (ep_ > 1 && !sdk::host_abi_at_least(1, 12)) {
      throw Error(ACCEL_ERROR_UNSUPPORTED, "ep_size needs a host with the expert group (ABI 1.12)");
    }
    // Checked here, not when planning: a name the model lacks is an option
    // refusal (exit 2), and the model's names are readable from create on.
    if (!config_.moe_leaf_classes.empty()) {
      moe_leaf_blocks_ = moe_leaf_units(sharding::read_model_layout(s), config_.moe_leaf_classes).size();
    }
    if (s.rank() != 0) return;
    for (const std::string& note : config_.notes) s.info() << "deepspeed_zero: " << note;
    if (!config_.unknown_keys.empty()) {
      // Key names come from the file: each shown bounded, at most 20 listed.
      constexpr size_t kListed = 20;
      std::string keys;
      for (size_t i = 0; i < config_.unknown_keys.size() && i < kListed; ++i) {
        keys += (keys.empty() ? "" : ", ") + shown_text(config_.unknown_keys[i]);
      }
      if (config_.unknown_keys.size() > kListed) {
        keys += sdk::format(" and %zu more", config_.unknown_keys.size() - kListed);
      }
      s.warn() << "deepspeed_zero: keys not understood in the DeepSpeed config, ignored: " << keys;
    }
  }

  void plan_model(const AccelPlanArgs&) override {
    const sdk::Services& s = services();
    units_ = sharding::read_model_layout(s);
    const int64_t h = hidden_size(units_);
    if (config_.param_persistence_threshold < 0) config_.param_persistence_threshold = 10 * h;
    if (config_.prefetch_bucket_size < 0) config_.prefetch_bucket_size = static_cast<int64_t>(0.9 * h * h);
    plan_ = plan_partitions(units_, config_.stage, config_.param_persistence_threshold, config_.max_reuse_distance);
    if (!config_.moe_leaf_classes.empty()) {
      if (s.rank() == 0) {
        s.info() << "deepspeed_zero: transformer_moe_cls_names: " << moe_leaf_blocks_
                 << (config_.stage == 3 ? " mixture-of-experts blocks, each gathered whole before its forward (router "
                                          "and every expert, as set_z3_leaf_modules makes them)"
                                        : " mixture-of-experts blocks; below stage 3 nothing is gathered (Accelerate "
                                          "applies it at stage 3 only)");
      }
    }
    if (config_.stage == 3) {
      config_.forward_prefetch = config_.prefetch_bucket_size > 0;
      config_.backward_prefetch = config_.prefetch_bucket_size > 0 ? sharding::BackwardPrefetch::backward_pre
                                                                   : sharding::BackwardPrefetch::no_prefetch;
      config_.max_prefetch_elements = config_.prefetch_bucket_size;
      config_.max_live_elements = config_.max_live_parameters;
    }

    AccelMeshSpec mesh{};
    mesh.struct_size = sizeof(mesh);
    mesh.sharding_size = config_.mesh.sharding_size;
    mesh.replica_size = config_.mesh.replica_size;
    if (ep_ > 1) mesh.expert_size = static_cast<int32_t>(ep_);
    cp_.declare(mesh);
    s.check(s.table()->comm->set_mesh(s.host(), &mesh), "set_mesh");
    cp_.plan(s);
    const uint32_t managed = managed_storage();
    if (managed == 0) return;
    for (const UnitLayout& unit : units_) {
      if (plan_.sharded(unit.index)) {
        s.check(s.table()->model->plan_manage_storage(s.host(), unit.index, managed), "plan_manage_storage");
      }
    }
  }

  void setup(const AccelSetupArgs&) override {
    const sdk::Services& s = services();
    AccelGroup* sharding = ops_.group(ACCEL_GROUP_SHARDING);
    AccelGroup* replica = ops_.group(ACCEL_GROUP_REPLICA);
    AccelGroup* data = ops_.group(ACCEL_GROUP_DATA);
    AccelGroup* world = ops_.group(ACCEL_GROUP_WORLD);
    const sdk::GroupShape sharding_shape = ops_.shape(sharding);
    const int32_t rank = s.rank();
    // The expert slices resolved after plan_model: the whole blocks' local shapes.
    if (ep_ > 1) units_ = sharding::read_model_layout(s, sharding::SplitParams::accept);
    const sharding::ExpertGroups experts = sharding::read_expert_groups(ops_);
    // Expert parallelism: the blocks holding experts partition over
    // EXPERT_DATA (DeepSpeed's expert data parallel group), the rest over
    // the data group.
    m_.store = std::make_unique<sharding::ShardStore>(ops_, config_, units_, plan_, sharding, world, rank,
                                                      managed_storage(), experts);
    m_.comm_buffers = std::make_unique<sdk::BufferPool>(s, /*keep_per_shape=*/2);
    m_.reducer =
        std::make_unique<sharding::GradReducer>(ops_, config_, *m_.store, sharding, replica, data, *m_.comm_buffers);
    m_.reducer->set_experts(experts);
    if (config_.stage == 3) {
      m_.gathers =
          std::make_unique<sharding::GatherEngine>(ops_, config_, plan_, *m_.store, *m_.comm_buffers);
    }
    if (config_.stage >= 2) {
      m_.schedule = std::make_unique<sharding::UnitSchedule>(config_, plan_, m_.gathers.get(), *m_.reducer,
                                                             static_cast<int32_t>(units_.size()));
    }
    if (config_.stage == 1 || config_.stage == 2) {
      m_.publish = std::make_unique<sharding::HostParamSync>(ops_, *m_.store, *m_.comm_buffers);
    }
    m_.optimizer = std::make_unique<sharding::ShardedOptimizer>(ops_, *m_.store, sharding, sharding_shape.rank,
                                                                sharding::TensorGroup{}, nullptr, experts);
    m_.checkpoint = std::make_unique<sharding::CheckpointIo>(ops_, config_, *m_.store, sharding, ops_.shape(replica),
                                                             rank, to_json(config_), 0, experts);
    if (rank == 0) s.info() << "deepspeed_zero: " << describe();
  }

  void step_begin(const AccelStepArgs& args) override {
    if ((args.flags & ACCEL_STEP_EVAL) != 0) return;
    m_.store->zero_grads(ops_);
    step_start_ = Clock::now();
    forward_ms_ = backward_ms_ = 0.0;
  }

  void unit_forward_pre(AccelUnitHookArgs& args) override {
    if (args.unit == 0) phase_start_ = Clock::now();
    if (m_.schedule) m_.schedule->forward_pre(args);
  }
  void unit_forward_post(AccelUnitHookArgs& args) override {
    if (m_.schedule) m_.schedule->forward_post(args);
    if (args.unit == static_cast<int32_t>(units_.size()) - 1) forward_ms_ += ms_since(phase_start_);
  }
  void unit_backward_pre(AccelUnitHookArgs& args) override {
    if (args.unit == static_cast<int32_t>(units_.size()) - 1) phase_start_ = Clock::now();
    if (m_.schedule) m_.schedule->backward_pre(args);
  }
  void unit_backward_post(AccelUnitHookArgs& args) override {
    if (m_.schedule) m_.schedule->backward_post(args);
    if (args.unit == 0) backward_ms_ += ms_since(phase_start_);
  }

  // Units whose gradients the host keeps: stage 0 (all-reduce) and stage 3's
  // persistent units (likewise); stage 1 (reduce-scatter of the accumulated
  // gradients into the partition, once per step).
  void gradients_ready(const AccelGradientsReadyArgs& args) override {
    if (!plan_.sharded(args.unit)) {
      m_.reducer->all_reduce_replicated(args.unit, args.grads);
    } else if (config_.stage == 1) {
      m_.reducer->reduce_scatter(args.unit, /*last_micro_batch=*/true);
    }
  }

  void gradients_finalize(const AccelStepArgs&) override { m_.reducer->finish(); }

  // The run clips to the resolved gradient_clipping (the config's,
  // --deepspeed_zero.gradient_clipping or --grad-clip; zero_config.h). The
  // host asks for its --grad-clip, times the fp16 loss scale when it clips
  // in scaled space, or +infinity to measure only: the resolved value takes
  // --grad-clip's place in that product (0: measure only, clip nothing).
  void clip_gradients(const AccelClipArgs& args) override {
    AccelClipArgs clip = args;
    if (std::isfinite(args.max_norm) && config_.gradient_clipping != host_max_grad_norm_) {
      clip.max_norm = config_.gradient_clipping > 0
                          ? args.max_norm / host_max_grad_norm_ * config_.gradient_clipping
                          : std::numeric_limits<double>::infinity();
    }
    m_.optimizer->clip_gradients(clip);
  }

  // The configured optimizer and schedule (DummyOptim / DummyScheduler)
  // replace the host's values; then stage 1/2 all-gather the partitions.
  void optimizer_step(const AccelOptimizerStepArgs& args) override {
    const Clock::time_point start = Clock::now();
    AccelOptimizerStepArgs step = args;
    const OptimizerChoice& o = config_.optimizer;
    const double host_lr = services().option<double>("train.lr");
    const double base_lr = o.lr.value_or(host_lr);
    if (config_.schedule.kind != ScheduleKind::host) {
      step.lr = schedule_lr(config_.schedule, args.step - 1, base_lr);
    } else if (o.lr && host_lr != 0.0) {
      step.lr = args.lr * (*o.lr / host_lr);  // the host's schedule, peaking at the config's lr
    }
    if (o.beta1) step.beta1 = *o.beta1;
    if (o.beta2) step.beta2 = *o.beta2;
    if (o.eps) step.eps = *o.eps;
    if (o.weight_decay) step.weight_decay = *o.weight_decay;
    m_.optimizer->step(step);
    if (m_.publish) m_.publish->publish();
    last_lr_ = step.lr;
    step_ms_ = ms_since(start);
  }

  void step_end(const AccelStepArgs& args) override {
    const sdk::Services& s = services();
    m_.end_step(s);
    s.metric("zero_stage", static_cast<double>(config_.stage));
    s.metric("ep_size", static_cast<double>(ep_));
    if (m_.publish) s.metric("param_allgather_elements", static_cast<double>(m_.publish->take_gathered_elements()));
    if ((args.flags & ACCEL_STEP_EVAL) != 0) return;
    s.metric("ds_lr", last_lr_);
    if (config_.wall_clock_breakdown) {
      s.metric("wall_clock_forward_ms", forward_ms_, ACCEL_METRIC_MAX);
      s.metric("wall_clock_backward_ms", backward_ms_, ACCEL_METRIC_MAX);
      s.metric("wall_clock_step_ms", step_ms_, ACCEL_METRIC_MAX);
      s.metric("wall_clock_total_ms", ms_since(step_start_), ACCEL_METRIC_MAX);
    }
    const int64_t done = args.step + 1;
    if (config_.steps_per_print > 0 && done % config_.steps_per_print == 0 && s.rank() == 0) {
      s.info() << "deepspeed_zero: step=" << done << ", lr=" << last_lr_;
    }
  }

  void save_state(const AccelStateArgs& args) override {
    m_.checkpoint->save(args, config_.save_16bit_model ? &config_.model_16bit_dtype : nullptr);
  }
  void load_state(const AccelStateArgs& args) override {
    m_.checkpoint->load(args);
    // Stage 1/2: the host loaded its full parameters itself; the partitions
    // were read from the same tensors, so they agree — refreshed anyway so
    // every rank starts from exactly the masters.
    if (m_.publish) m_.publish->publish();
  }

  void teardown() override { m_.teardown(); }

 private:
  // What the plugin takes over of each partitioned unit: stage 2 the
  // gradients (the host keeps the parameters), stage 3 both.
  uint32_t managed_storage() const {
    if (config_.stage == 3) return ACCEL_STORAGE_PARAMS | ACCEL_STORAGE_GRADS;
    if (config_.stage == 2) return ACCEL_STORAGE_GRADS;
    return 0;
  }

  // "stage 3 over 4 ranks, offload none/none, 3 partitioned group(s), persistent: none"
  std::string describe() const {
    std::string persistent;
    for (const UnitLayout& u : units_) {
      if (!plan_.sharded(u.index)) persistent += (persistent.empty() ? "" : " ") + u.name;
    }
    const int host_threads = m_.optimizer->host_step_threads();
    return sdk::format(
        "stage %d over %d ranks, offload optimizer %s / param %s%s, micro batch %lld per rank x %lld "
        "accumulation, %zu partitioned group(s); whole on every rank: %s",
        config_.stage, config_.mesh.sharding_size, to_string(config_.offload_optimizer),
        to_string(config_.offload_param),
        host_threads > 0 ? sdk::format(" (fused CPU AdamW, %d thread(s))", host_threads).c_str() : "",
        static_cast<long long>(config_.micro_batch_per_gpu),
        static_cast<long long>(config_.gradient_accumulation_steps), plan_.groups.size(),
        persistent.empty() ? "none" : persistent.c_str());
  }

  ZeroConfig config_;
  const sharding::ContextParallel cp_;
  double host_max_grad_norm_;  // --grad-clip, > 0 whenever the host asks for a finite max norm
  const int64_t ep_;           // ep_size: the mesh's expert size
  size_t moe_leaf_blocks_ = 0;  // the blocks transformer_moe_cls_names names
  const sdk::Kernels ops_;
  sharding::GatherPlan plan_;
  std::vector<UnitLayout> units_;
  sharding::Machinery m_;
  Clock::time_point step_start_, phase_start_;
  double forward_ms_ = 0.0, backward_ms_ = 0.0, step_ms_ = 0.0, last_lr_ = 0.0;
};

}  // namespace
}  // namespace accel::zero

ACCEL_PLUGIN(accel::zero::DeepSpeedZero)
