// fsdp — fully sharded data parallel (FullyShardedDataParallelPlugin). Each
// unit's flat parameters, gradients and AdamW state are split evenly over the
// SHARDING group; a wrap group's full parameters exist only around its
// forward and backward (gathered from the shards, released after), its
// gradients are reduce-scattered into the shards, and the optimizer steps
// the shards. Units matched by ignored_modules, and every unit under
// NO_SHARD, stay host-owned and replicated: their gradients are all-reduced
// like ddp's and fsdp steps them too (it owns the optimizer step).
//
// This file is the plugin's public face — descriptor, option schema, hooks —
// and wires fsdp's own parts, fsdp_config (options) and wrap_plan (what is
// sharded, in which groups), to the sharding machinery it shares with
// deepspeed_zero (plugins/sharding: shards and initialisation, the gather
// engine and gradient reducer, the unit schedule, clipping and AdamW,
// checkpoints by global offset). Every option of accelerate's plugin is
// documented in plugins/fsdp/README.md.
//
// Built with the SDK against the ABI headers alone. Hooks run on the host's
// loop thread only.
#include <accel/sdk/sdk.hpp>
#include <accel/sdk/kernels.hpp>

#include <memory>
#include <string>
#include <vector>

#include "fsdp_config.h"
#include "sharding/context_parallel.h"
#include "sharding/expert_slices.h"
#include "sharding/machinery.h"
#include "sharding/model_layout.h"
#include "wrap_plan.h"

namespace accel::fsdp {
namespace {

using sdk::Error;
using sharding::CheckpointIo;
using sharding::GatherEngine;
using sharding::GradReducer;
using sharding::ShardedOptimizer;
using sharding::ShardStore;
using sharding::UnitSchedule;

class Fsdp final : public sdk::Plugin {
 public:
  static constexpr sdk::PluginInfo info{
      "fsdp", "1.0.0", "fully sharded data parallel: sharded parameters, gradients and optimizer state "
                       "(FullyShardedDataParallelPlugin)",
      ACCEL_PLUGIN_PARALLEL,
      sharding::kShardingCapabilities,
      "ddp,deepspeed_zero,megatron"};

  static constexpr sdk::Option options[] = {
      {"fsdp_version", ACCEL_OPTION_ENUM, "1",
       "1 or 2: the same sharding; 2 reads reshard_after_forward as true/false only", "1|2"},
      {"sharding_strategy", ACCEL_OPTION_ENUM, "FULL_SHARD",
       "deprecated spelling of reshard_after_forward: mesh and release policy",
       "FULL_SHARD|SHARD_GRAD_OP|NO_SHARD|HYBRID_SHARD|HYBRID_SHARD_ZERO2"},
      {"reshard_after_forward", ACCEL_OPTION_STRING, "true",
       "release gathered parameters after forward (true) or keep them until backward (false); with fsdp_version 1 "
       "also a sharding strategy name"},
      {"hybrid_shard_group_size", ACCEL_OPTION_INT, "0",
       "HYBRID_*: ranks per sharding group (0: the local world size); must divide the world size", nullptr, "0",
       "2147483647"},
      {"backward_prefetch", ACCEL_OPTION_ENUM, "NO_PREFETCH",
       "issue the next group's all_gather before (BACKWARD_PRE) or after (BACKWARD_POST) this group's backward",
       "BACKWARD_PRE|BACKWARD_POST|NO_PREFETCH"},
      {"forward_prefetch", ACCEL_OPTION_BOOL, "false",
       "issue the next group's all_gather when the current group's forward starts"},
      {"limit_all_gathers", ACCEL_OPTION_BOOL, "true",
       "at most two groups' full parameters alive or in flight: a prefetch that would exceed it waits for a release"},
      {"param_dtype", ACCEL_OPTION_STRING, nullptr,
       "dtype parameters are gathered and computed in (default fp32)", "fp32|bf16|fp16"},
      {"reduce_dtype", ACCEL_OPTION_STRING, nullptr,
       "dtype of the gradient reduce-scatter (default param_dtype)", "fp32|bf16|fp16"},
      {"buffer_dtype", ACCEL_OPTION_STRING, nullptr, "accepted, no effect: the models have no buffers",
       "fp32|bf16|fp16"},
      {"auto_wrap_policy", ACCEL_OPTION_ENUM, "no_wrap",
       "wrap groups: one per matching unit (transformer_based_wrap), consecutive units up to min_num_params "
       "(size_based_wrap), or the whole model (no_wrap)",
       "transformer_based_wrap|size_based_wrap|no_wrap"},
      {"transformer_cls_names_to_wrap", ACCEL_OPTION_STRING, nullptr,
       "comma-separated unit kinds (embedding, block, head) or unit-name prefixes wrapped alone by "
       "transformer_based_wrap (default: block)"},
      {"min_num_params", ACCEL_OPTION_INT, "100000000", "elements per wrap group under size_based_wrap", nullptr,
       "0", "1000000000000000"},
      {"cpu_offload", ACCEL_OPTION_BOOL, "false",
       "keep parameter, gradient and optimizer shards in pinned host memory; the optimizer steps on the host"},
      {"ignored_modules", ACCEL_OPTION_STRING, nullptr,
       "regular expression (full match) of unit names fsdp leaves replicated and host-owned"},
      {"state_dict_type", ACCEL_OPTION_ENUM, "FULL_STATE_DICT",
       "checkpoint puts: whole tensors from rank 0 (FULL) or every rank's shard (SHARDED; LOCAL is written as "
       "SHARDED)",
       "FULL_STATE_DICT|SHARDED_STATE_DICT|LOCAL_STATE_DICT"},
      {"activation_checkpointing", ACCEL_OPTION_BOOL, "false",
       "recompute every block's activations in backward"},
      {"sync_module_states", ACCEL_OPTION_BOOL, "false",
       "broadcast each unit's initial weights from rank 0 before the shards are cut"},
      {"cpu_ram_efficient_loading", ACCEL_OPTION_BOOL, "false",
       "each rank initialises only its own shard's slice of the seeded weights (model->init_range; no rank holds a "
       "whole unit), which are rank 0's weights (requires sync_module_states)"},
      {"use_orig_params", ACCEL_OPTION_BOOL, "false",
       "accepted, not applicable: the optimizer already sees each parameter's range"},
      {"param_init_fn", ACCEL_OPTION_STRING, nullptr,
       "accepted, not applicable: parameters are initialised from the seed and their name"},
      {"state_dict_config", ACCEL_OPTION_STRING, nullptr,
       "accepted, not applicable: offload_to_cpu is implied, rank0_only follows from state_dict_type"},
      {"optim_state_dict_config", ACCEL_OPTION_STRING, nullptr,
       "accepted, not applicable: optimizer state follows state_dict_type"},
      {"cp_size", ACCEL_OPTION_INT, "1",
       "context parallelism (Accelerate's ParallelismConfig cp_size): ranks each sequence is split over; the "
       "shards span them (torchtitan's dp_shard_cp)",
       nullptr, "1", "2147483647"},
      ACCEL_CONTEXT_PARALLEL_OPTIONS("p2p"),
      {"ep_size", ACCEL_OPTION_INT, "1",
       "expert parallelism (torchtitan's expert_parallel_degree; Accelerate's FSDP has none): ranks each "
       "mixture-of-experts layer's experts are split over, tokens exchanged by all_to_all_v; the blocks holding "
       "experts are sharded over the ranks holding the same experts (world / ep_size; torchtitan's dp_shard_mod_ep), "
       "the other units over every rank",
       nullptr, "1", "2147483647"},
  };

  explicit Fsdp(const sdk::Services& s)
      : Plugin(s), config_(read_config(s)), cp_(s, "cp_size", s.world_size()), ep_(s.option<int64_t>("ep_size")),
        ops_(s) {
    if (ep_ == 1) return;
    if (s.world_size() % ep_ != 0) {
      throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                  sdk::format("ep_size %lld does not divide the world size %d (expert groups are made of data ranks)",
                              static_cast<long long>(ep_), s.world_size()));
    }
    if (config_.mesh.replica_size > 1) {
      throw Error(ACCEL_ERROR_UNSUPPORTED, "ep_size with a hybrid sharding strategy: the blocks holding experts "
                                           "shard over the ranks holding the same experts, beside which no replica "
                                           "reduction is built; use FULL_SHARD or SHARD_GRAD_OP");
    }
    if (!sdk::host_abi_at_least(1, 12)) {
      throw Error(ACCEL_ERROR_UNSUPPORTED, "ep_size needs a host with the expert group (ABI 1.12)");
    }
  }

  void plan_model(const AccelPlanArgs&) override {
    const sdk::Services& s = services();
    const std::vector<UnitLayout> units = sharding::read_model_layout(s);
    std::vector<std::string> widened;
    std::vector<bool> sharded(units.size(), config_.shards());
    if (config_.shards()) {
      const std::vector<bool> ignored = select_ignored(units, config_.ignored_regex, &widened);
      for (size_t u = 0; u < units.size(); ++u) sharded[u] = !ignored[u];
    }
    plan_ = plan_wrap_groups(units, sharded, config_.wrap_policy, config_.wrap_names, config_.min_num_params);
    for (const std::string& name : widened) {
      s.warn() << "unit " << name << " is tied to an ignored unit: it is left host-owned too";
    }

    AccelMeshSpec mesh{};
    mesh.struct_size = sizeof(mesh);
    mesh.sharding_size = config_.mesh.sharding_size;
    mesh.replica_size = config_.mesh.replica_size;
    if (ep_ > 1) mesh.expert_size = static_cast<int32_t>(ep_);
    cp_.declare(mesh);
    s.check(s.table()->comm->set_mesh(s.host(), &mesh), "set_mesh");
    cp_.plan(s);
    const AccelModelServices& model = *s.table()->model;
    for (const UnitLayout& unit : units) {
      if (plan_.sharded(unit.index)) {
        s.check(model.plan_manage_storage(s.host(), unit.index, ACCEL_STORAGE_PARAMS | ACCEL_STORAGE_GRADS),
                "plan_manage_storage");
      }
      if (config_.activation_checkpointing && unit.kind == ACCEL_UNIT_BLOCK) {
        s.check(model.set_checkpointing(s.host(), unit.index, true), "set_checkpointing");
      }
    }
  }

  void setup(const AccelSetupArgs&) override {
    const sdk::Services& s = services();
    // The expert slices resolved after plan_model: the whole blocks' local shapes.
    units_ = sharding::read_model_layout(s, ep_ > 1 ? sharding::SplitParams::accept : sharding::SplitParams::refuse);
    const sharding::ExpertGroups experts = sharding::read_expert_groups(ops_);
    AccelGroup* sharding = ops_.group(ACCEL_GROUP_SHARDING);
    AccelGroup* replica = ops_.group(ACCEL_GROUP_REPLICA);
    AccelGroup* data = ops_.group(ACCEL_GROUP_DATA);
    AccelGroup* world = ops_.group(ACCEL_GROUP_WORLD);
    const sdk::GroupShape sharding_shape = ops_.shape(sharding);
    const sdk::GroupShape replica_shape = ops_.shape(replica);
    if (sharding_shape.size != config_.mesh.sharding_size || replica_shape.size != config_.mesh.replica_size) {
      throw Error(ACCEL_ERROR_FAILED_PRECONDITION,
                  sdk::format("the resolved mesh has sharding %d x replica %d, fsdp asked for %d x %d",
                              sharding_shape.size, replica_shape.size, config_.mesh.sharding_size,
                              config_.mesh.replica_size));
    }
    const int32_t rank = s.rank();
    // Expert parallelism: the blocks holding experts shard over EXPERT_DATA,
    // the rest over every rank (shard_store.h).
    m_.store = std::make_unique<ShardStore>(ops_, config_, units_, plan_, sharding, world, rank,
                                            ACCEL_STORAGE_PARAMS | ACCEL_STORAGE_GRADS, experts);
    // Staging buffers recur with the same shapes every step: at most two
    // groups are in flight under limit_all_gathers, one reduce_scatter at
    // a time, so two idle buffers of a shape cover the plan.
    m_.comm_buffers = std::make_unique<sdk::BufferPool>(s, /*keep_per_shape=*/2);
    m_.gathers = std::make_unique<GatherEngine>(ops_, config_, plan_, *m_.store, *m_.comm_buffers);
    m_.reducer = std::make_unique<GradReducer>(ops_, config_, *m_.store, sharding, replica, data, *m_.comm_buffers);
    m_.reducer->set_experts(experts);
    m_.schedule = std::make_unique<UnitSchedule>(config_, plan_, m_.gathers.get(), *m_.reducer,
                                                 static_cast<int32_t>(units_.size()));
    m_.optimizer = std::make_unique<ShardedOptimizer>(ops_, *m_.store, sharding, sharding_shape.rank,
                                                      sharding::TensorGroup{}, nullptr, experts);
    m_.checkpoint = std::make_unique<CheckpointIo>(ops_, config_, *m_.store, sharding, replica_shape, rank,
                                                   to_json(config_), 0, experts);
    if (rank == 0) s.info() << "fsdp: " << describe_plan();
  }

  void step_begin(const AccelStepArgs& args) override {
    if ((args.flags & ACCEL_STEP_EVAL) == 0) m_.store->zero_grads(ops_);
  }

  void unit_forward_pre(AccelUnitHookArgs& args) override { m_.schedule->forward_pre(args); }
  void unit_forward_post(AccelUnitHookArgs& args) override { m_.schedule->forward_post(args); }
  void unit_backward_pre(AccelUnitHookArgs& args) override { m_.schedule->backward_pre(args); }
  void unit_backward_post(AccelUnitHookArgs& args) override { m_.schedule->backward_post(args); }

  void gradients_ready(const AccelGradientsReadyArgs& args) override {
    if (!plan_.sharded(args.unit)) m_.reducer->all_reduce_replicated(args.unit, args.grads);
  }

  void gradients_finalize(const AccelStepArgs&) override { m_.reducer->finish(); }

  void clip_gradients(const AccelClipArgs& args) override { m_.optimizer->clip_gradients(args); }

  void optimizer_step(const AccelOptimizerStepArgs& args) override { m_.optimizer->step(args); }

  void step_end(const AccelStepArgs&) override {
    const sdk::Services& s = services();
    m_.end_step(s);
    s.metric("wrap_groups", static_cast<double>(plan_.groups.size()));
    s.metric("sharding_size", static_cast<double>(config_.mesh.sharding_size));
    s.metric("ep_size", static_cast<double>(ep_));
  }

  void save_state(const AccelStateArgs& args) override { m_.checkpoint->save(args); }
  void load_state(const AccelStateArgs& args) override { m_.checkpoint->load(args); }

  void teardown() override { m_.teardown(); }

 private:
  // "FULL_SHARD, sharding 4 x replica 1, 3 wrap groups: [embedding head] [block.0] [block.1]; host-owned: none"
  std::string describe_plan() const {
    std::string text = sdk::format("%s, sharding %d x replica %d, reshard_after_forward %s, %zu wrap group(s):",
                                   to_string(config_.strategy), config_.mesh.sharding_size,
                                   config_.mesh.replica_size, config_.reshard_after_forward ? "true" : "false",
                                   plan_.groups.size());
    for (const WrapGroup& g : plan_.groups) {
      text += " [";
      for (size_t i = 0; i < g.units.size(); ++i) {
        text += (i ? " " : "") + units_[static_cast<size_t>(g.units[i])].name;
      }
      text += "]";
    }
    std::string host_owned;
    for (const UnitLayout& u : units_) {
      if (!plan_.sharded(u.index)) host_owned += (host_owned.empty() ? "" : " ") + u.name;
    }
    return text + "; host-owned: " + (host_owned.empty() ? "none" : host_owned);
  }

  const FsdpConfig config_;
  const sharding::ContextParallel cp_;
  const int64_t ep_;  // ep_size: the mesh's expert size
  const sdk::Kernels ops_;
  WrapPlan plan_;
  std::vector<UnitLayout> units_;
  sharding::Machinery m_;
};

}  // namespace
}  // namespace accel::fsdp

ACCEL_PLUGIN(accel::fsdp::Fsdp)
