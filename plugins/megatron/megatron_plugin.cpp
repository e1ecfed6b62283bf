// megatron — Megatron-LM's tensor, sequence and pipeline parallelism
// (accelerate's MegatronLMPlugin). The plugin plans; the host runs:
//   - plan_model declares the mesh (tensor = tp_degree, the rest of the world
//     data parallel: world = T x D) and splits every COLUMN, ROW and VOCAB
//     parameter over the tensor group along its hint's dimension; the host
//     resolves the splits and runs the model with Megatron's f / g operators,
//     the vocab-parallel embedding and the vocab-parallel cross-entropy
//     (host/model/tensor_parallel.h). No rank holds the full logits.
//   - sequence_parallelism: the host splits LayerNorm / residual regions
//     along the sequence (model->plan_sequence_parallel); the gradients of
//     the whole parameters there are partial, summed over TENSOR first.
//   - recompute_activations: selective (the attention core: what the host's
//     fused attention kernel does anyway) or, at recompute_granularity full,
//     every block (the host's activation checkpointing, the f / g
//     collectives run again).
//   - ep_degree: the mesh's expert size (ABI 1.12). The host splits every
//     mixture-of-experts layer's experts over ACCEL_GROUP_EXPERT and routes
//     tokens there with all_to_all_v; the plugin reduces the experts'
//     gradients over EXPERT_DATA and sums the clipping norm over EXPERT
//     (plugins/sharding/expert_slices.h).
//   - pp_degree: the units cut into stages (pipeline_schedule.h, plan_stages);
//     the plugin takes the train step over and runs 1F1B, interleaved or
//     GPipe through the host's run_forward / run_backward, sending
//     activations and gradients stage to stage (pipeline_runner.h); the
//     first and last stage sum the tied embedding's gradients (Megatron's
//     embedding group). At pp_degree 1 it declines train_step: the host's
//     own loop runs.
// The optimizer is the shared sharding machinery's (plugins/sharding), over
// this rank's tensor-parallel slices:
//   - gradients are averaged over the data group as each unit's backward
//     ends: all-reduced, or with use_distributed_optimizer reduce-scattered
//     into this rank's partition (Megatron's distributed optimizer: ZeRO-1
//     over the data group), stepped there and all-gathered back.
//   - the clipping norm sums over data and tensor groups, counting each
//     parameter once: split parameters by every tensor rank (each holds a
//     distinct part), whole ones by tensor rank 0 only. Within a tensor
//     group whole parameters' gradients are already equal (their inputs'
//     gradients passed a g operator's all-reduce, f in backward).
//   - AdamW moments are saved as slices at their global offsets, so any
//     layout, any strategy, resumes them.
// Every MegatronLMPlugin field, implemented or refused with its reason:
// plugins/megatron/README.md.
//
// Built with the SDK against the ABI headers alone. Hooks run on the host's
// loop thread only.
#include <accel/sdk/checked_math.hpp>
#include <accel/sdk/sdk.hpp>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "megatron_schedules.h"
#include "pipeline_runner.h"
#include "pipeline_schedule.h"
#include "sharding/context_parallel.h"
#include "sharding/expert_slices.h"
#include "sharding/machinery.h"
#include "sharding/model_layout.h"

namespace accel::megatron {
namespace {

using sdk::Error;
using sharding::UnitLayout;

class Megatron final : public sdk::Plugin {
 public:
  static constexpr sdk::PluginInfo info{
      "megatron", "0.3.0",
      "Megatron-LM tensor, sequence and pipeline parallelism: column/row-parallel blocks, vocab-parallel embedding "
      "and loss, the distributed optimizer, 1F1B / interleaved pipeline schedules (MegatronLMPlugin)",
      ACCEL_PLUGIN_PARALLEL,
      ACCEL_CAP_CPU | ACCEL_CAP_CUDA | ACCEL_CAP_REDUCES_GRADS | ACCEL_CAP_TENSOR_PARALLEL | ACCEL_CAP_PIPELINE_PARALLEL |
          ACCEL_CAP_SHARDS_OPTIMIZER | ACCEL_CAP_RESHARD_ON_LOAD,
      "ddp,fsdp,deepspeed_zero"};

  // The schema's upper bounds. Degrees and layer counts are int32 on the
  // ABI (world size, mesh sizes, unit indices); iterations, micro-batches
  // and sequence lengths mirror the host's own --steps, --grad-accum and
  // --seq-len maxima, and samples are iterations x the largest global batch
  // (--batch-size <= 2^20): every product the plugin forms stays in int64.
  static constexpr const char* kMaxDegree = "2147483647";
  static constexpr const char* kMaxMicroBatches = "1048576";
  static constexpr const char* kMaxIterations = "1000000000";
  static constexpr const char* kMaxSamples = "1048576000000000";
  static constexpr const char* kMaxSequence = "1048576";

  static constexpr sdk::Option options[] = {
      {"tp_degree", ACCEL_OPTION_INT, "1", "tensor-parallel degree T: ranks splitting each layer (world = T x data)",
       nullptr, "1", kMaxDegree},
      {"pp_degree", ACCEL_OPTION_INT, "1",
       "pipeline-parallel degree P: stages the units are cut into (world = P x data x tp_degree)", nullptr, "1",
       kMaxDegree},
      {"num_layers_per_virtual_pipeline_stage", ACCEL_OPTION_INT, "0",
       "layers per virtual stage: each stage runs L / (P x this) chunks, interleaved (0: one chunk per stage)",
       nullptr, "0", kMaxDegree},
      {"cp_degree", ACCEL_OPTION_INT, "1",
       "context-parallel degree C: ranks each sequence is split over (world = P x data x C x T; "
       "Megatron-Core's context_parallel_size)",
       nullptr, "1", kMaxDegree},
      ACCEL_CONTEXT_PARALLEL_OPTIONS("p2p"),
      {"ep_degree", ACCEL_OPTION_INT, "1",
       "expert-parallel degree E: ranks each mixture-of-experts layer's experts are split over, E / ep_degree "
       "each, tokens exchanged by all_to_all_v (a divisor of the data-parallel size; Megatron-Core's "
       "expert_model_parallel_size)",
       nullptr, "1", kMaxDegree},
      {"pipeline_schedule", ACCEL_OPTION_ENUM, "1f1b",
       "1f1b (Megatron's; interleaved with virtual stages) or gpipe (every forward, then every backward)",
       "1f1b|gpipe"},
      {"sequence_parallelism", ACCEL_OPTION_BOOL, "false",
       "split LayerNorm and dropout regions along the sequence (needs tp_degree > 1)"},
      {"recompute_activations", ACCEL_OPTION_BOOL, "false",
       "recompute activations in backward, at recompute_granularity (Megatron's --recompute-activations: selective)"},
      {"recompute_granularity", ACCEL_OPTION_ENUM, "selective",
       "selective: the attention core (the host's fused attention never stores its scores); full: every block",
       "selective|full"},
      {"use_distributed_optimizer", ACCEL_OPTION_BOOL, "false",
       "partition the fp32 master weights, gradients and AdamW state over the data group (ZeRO-1 over data)"},
      {"gradient_clipping", ACCEL_OPTION_DOUBLE, "0",
       "refused when given: the host's --grad-clip is the one global-norm clip setting", nullptr, "0"},
      {"num_micro_batches", ACCEL_OPTION_INT, "1",
       "micro-batches per step: must equal the host's --grad-accum (the one accumulation setting)", nullptr, "1",
       kMaxMicroBatches},
      {"weight_decay_incr_style", ACCEL_OPTION_ENUM, "constant",
       "weight decay from start_weight_decay to end_weight_decay over the run's --steps", "constant|linear|cosine"},
      {"start_weight_decay", ACCEL_OPTION_DOUBLE, "0", "weight decay at step 1 (when not given: the host's --weight-decay)",
       nullptr, "0"},
      {"end_weight_decay", ACCEL_OPTION_DOUBLE, "0",
       "weight decay from the last step on (when not given: the host's --weight-decay)", nullptr, "0"},
      {"lr_decay_style", ACCEL_OPTION_ENUM, "linear",
       "Megatron's schedule (when any lr_ field is given): decay after warmup, to min_lr",
       "constant|linear|cosine|inverse-square-root"},
      {"lr_decay_iters", ACCEL_OPTION_INT, "0", "decay horizon in iterations (default: --steps)", nullptr, "0",
       kMaxIterations},
      {"lr_decay_samples", ACCEL_OPTION_INT, "0", "decay horizon in samples (global batches x --batch-size)", nullptr,
       "0", kMaxSamples},
      {"lr_warmup_iters", ACCEL_OPTION_INT, "0", "linear warmup from 0, in iterations", nullptr, "0", kMaxIterations},
      {"lr_warmup_samples", ACCEL_OPTION_INT, "0", "linear warmup from 0, in samples", nullptr, "0", kMaxSamples},
      {"lr_warmup_fraction", ACCEL_OPTION_DOUBLE, "0", "linear warmup over this fraction of the decay horizon", nullptr,
       "0", "1"},
      {"min_lr", ACCEL_OPTION_DOUBLE, "0", "the learning rate after decay (when not given: the host's --min-lr)",
       nullptr, "0"},
      {"eval_iters", ACCEL_OPTION_INT, "0", "refused when given: the host's --eval-steps is the one setting", nullptr,
       "0", kMaxIterations},
      {"eval_interval", ACCEL_OPTION_INT, "0", "refused when given: the host's --eval-every is the one setting",
       nullptr, "0", kMaxIterations},
      {"train_iters", ACCEL_OPTION_INT, "0", "refused when given: the host's --steps is the run's length", nullptr,
       "0", kMaxIterations},
      {"train_samples", ACCEL_OPTION_INT, "0",
       "refused when given: give --steps = train_samples / --batch-size", nullptr, "0", kMaxSamples},
      {"train_step_class", ACCEL_OPTION_STRING, "GPTTrainStep",
       "GPTTrainStep (the host's decoder models); BertTrainStep and T5TrainStep need models the host lacks"},
      {"encoder_seq_length", ACCEL_OPTION_INT, "0", "refused when given: needs an encoder-decoder (T5) model",
       nullptr, "0", kMaxSequence},
      {"decoder_seq_length", ACCEL_OPTION_INT, "0", "refused when given: needs an encoder-decoder (T5) model",
       nullptr, "0", kMaxSequence},
      {"pipeline_model_parallel_split_rank", ACCEL_OPTION_INT, "0",
       "refused when given: the encoder/decoder split of a T5 model", nullptr, "0", kMaxDegree},
  };

  explicit Megatron(const sdk::Services& s)
      : Plugin(s),
        ops_(s),
        tp_(s.option<int64_t>("tp_degree")),
        pp_(s.option<int64_t>("pp_degree")),
        cp_(s, "cp_degree", checked_data_ranks(s)),
        ep_(s.option<int64_t>("ep_degree")),
        sequence_parallel_(s.option<bool>("sequence_parallelism")),
        recompute_(s.option<bool>("recompute_activations")),
        full_recompute_(recompute_ && s.option<std::string>("recompute_granularity") == "full"),
        distributed_optimizer_(s.option<bool>("use_distributed_optimizer")) {
    plan_pipeline(s);
    // One stage: the host's own micro-batch loop runs the model.
    if (pp_ == 1) decline(&AccelHooks::train_step);
    if (sequence_parallel_ && tp_ == 1) {
      throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                  "sequence_parallelism needs tp_degree > 1 (it splits the tensor group's replicated regions)");
    }
    if (sequence_parallel_ && !ACCEL_HAS_FN(s.table()->model, AccelModelServices, plan_sequence_parallel)) {
      throw Error(ACCEL_ERROR_UNSUPPORTED,
                  "sequence_parallelism needs a host with model->plan_sequence_parallel (ABI 1.4)");
    }
    if (s.option_is_set("gradient_clipping")) {
      throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                  "gradient_clipping: give the host's --grad-clip (the one clipping setting every strategy reads)");
    }
    if (s.option_is_set("num_micro_batches") &&
        s.option<int64_t>("num_micro_batches") != s.option<int64_t>("train.grad_accum_steps")) {
      throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                  sdk::format("num_micro_batches %lld: give the host's --grad-accum %lld too (the one accumulation "
                              "setting; it is %lld)",
                              static_cast<long long>(s.option<int64_t>("num_micro_batches")),
                              static_cast<long long>(s.option<int64_t>("num_micro_batches")),
                              static_cast<long long>(s.option<int64_t>("train.grad_accum_steps"))));
    }
    refuse_unserved_fields(s);
    check_expert_parallel(s);
    if (s.option<std::string>("train.optimizer") != "adamw") {
      throw Error(ACCEL_ERROR_UNSUPPORTED, "train.optimizer " + s.option<std::string>("train.optimizer") +
                                               ": megatron's optimizer is AdamW only");
    }
    wd_.style = s.option<std::string>("weight_decay_incr_style");
    const double host_wd = s.option<double>("train.weight_decay");
    wd_.start = s.option_is_set("start_weight_decay") ? s.option<double>("start_weight_decay") : host_wd;
    wd_.end = s.option_is_set("end_weight_decay") ? s.option<double>("end_weight_decay") : host_wd;
    const int64_t global_batch =
        samples_product(s.option<int64_t>("train.micro_batch_size"), s.option<int64_t>("train.grad_accum_steps"),
                        "the global batch (--batch-size)");
    const int64_t train_samples = samples_product(s.option<int64_t>("train.steps"), global_batch, "--steps");
    wd_.incr_samples = train_samples;
    read_lr_schedule(s, global_batch, train_samples);
    if (wd_.style == "constant" && wd_.start != wd_.end) {
      throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                  "weight_decay_incr_style constant needs start_weight_decay equal to end_weight_decay (Megatron's "
                  "rule); give linear or cosine to change it over the run");
    }
    const auto data = static_cast<int32_t>(checked_data_ranks(s));
    // The distributed optimizer partitions over the whole data group; without
    // it every data rank is a replica.
    config_.mesh.sharding_size = distributed_optimizer_ ? data : 1;
    config_.mesh.replica_size = distributed_optimizer_ ? 1 : data;
    config_.state_dict_type = sharding::StateDictType::sharded;  // each partition saved where it lives
  }

  void plan_model(const AccelPlanArgs&) override {
    const AccelHostServices& t = *services().table();
    AccelMeshSpec mesh{};
    mesh.struct_size = sizeof(mesh);
    mesh.tensor_size = static_cast<int32_t>(tp_);
    mesh.pipeline_size = static_cast<int32_t>(pp_);
    mesh.sharding_size = config_.mesh.sharding_size;
    mesh.replica_size = config_.mesh.replica_size;
    cp_.declare(mesh);
    if (ep_ > 1) mesh.expert_size = static_cast<int32_t>(ep_);  // checked for a 1.12 host at create
    services().check(t.comm->set_mesh(services().host(), &mesh), "set_mesh");
    cp_.plan(services());
    if (pp_ > 1) {
      services().check(t.model->plan_stages(services().host(), stage_plan_.stage_of_unit.data(),
                                            static_cast<int32_t>(stage_plan_.stage_of_unit.size())),
                       "plan_stages");
    }
    if (sequence_parallel_) {
      services().check(t.model->plan_sequence_parallel(services().host(), ACCEL_GROUP_TENSOR),
                       "plan_sequence_parallel");
    }
    const AccelModelInfo* model = nullptr;
    services().check(t.model->get_info(services().host(), &model), "get_info");
    for (int32_t u = 0; u < model->num_units; ++u) {
      const AccelUnitInfo* unit = nullptr;
      services().check(t.model->get_unit(services().host(), u, &unit), "get_unit");
      for (int32_t p = 0; p < unit->num_params; ++p) {
        const AccelParamInfo* param = nullptr;
        services().check(t.model->get_param(services().host(), u, p, &param), "get_param");
        const int32_t dim = split_dim(*param);
        if (dim < 0) continue;
        services().check(t.model->plan_split_param(services().host(), u, p, dim, ACCEL_GROUP_TENSOR),
                         std::string("plan_split_param ") + param->name);
      }
      // Selective recompute needs no plan: the host's attention is the fused
      // (flash) kernel, which keeps q, k, v, the output and each row's
      // log-sum-exp and recomputes the scores in backward — Megatron's
      // "attention core" recompute (Korthikanti et al. 2022), done by the
      // kernel. Full recompute re-runs every block.
      if (full_recompute_ && unit->kind == ACCEL_UNIT_BLOCK) {
        services().check(t.model->set_checkpointing(services().host(), u, true), "set_checkpointing");
      }
    }
  }

  // The splits have resolved: the layout read here holds this rank's slices.
  void setup(const AccelSetupArgs&) override {
    const sdk::Services& s = services();
    units_ = sharding::read_model_layout(s, sharding::SplitParams::accept);
    // A pipeline stage keeps the optimizer state of the units it holds.
    const std::vector<UnitLayout> held = sharding::held_units(units_);
    plan_.group_of.assign(units_.size(), -1);
    if (distributed_optimizer_) {
      // One partition group of every unit: ZeRO-1 gathers nothing per unit.
      // Units holding expert slices partition over EXPERT_DATA, the rest
      // over the data group (shard_store.h; Megatron-Core's expert data
      // parallel group).
      sharding::GatherGroup all;
      for (const UnitLayout& u : held) {
        all.units.push_back(u.index);
        plan_.group_of[static_cast<size_t>(u.index)] = 0;
      }
      if (!all.units.empty()) plan_.groups.push_back(std::move(all));
    }
    AccelGroup* sharding = ops_.group(ACCEL_GROUP_SHARDING);
    AccelGroup* replica = ops_.group(ACCEL_GROUP_REPLICA);
    AccelGroup* data = ops_.group(ACCEL_GROUP_DATA);
    tensor_.group = ops_.group(ACCEL_GROUP_TENSOR);
    const sdk::GroupShape tensor = ops_.shape(tensor_.group);
    tensor_.rank = tensor.rank;
    tensor_.size = tensor.size;
    data_size_ = ops_.shape(data).size;
    if (tensor.size != tp_) {
      throw Error(ACCEL_ERROR_INTERNAL, "the tensor group has " + std::to_string(tensor.size) +
                                            " ranks, tp_degree is " + std::to_string(tp_));
    }
    const sdk::GroupShape sharding_shape = ops_.shape(sharding);
    const sharding::ExpertGroups experts = sharding::read_expert_groups(ops_);
    if (experts.size != ep_) {
      throw Error(ACCEL_ERROR_INTERNAL, "the expert group has " + std::to_string(experts.size) +
                                            " ranks, ep_degree is " + std::to_string(ep_));
    }
    // The host keeps the parameters and gradients (the model runs on them);
    // the partitions are the optimizer's.
    m_.store = std::make_unique<sharding::ShardStore>(ops_, config_, held, plan_, sharding,
                                                      ops_.group(ACCEL_GROUP_WORLD), s.rank(), /*managed=*/0, experts);
    m_.comm_buffers = std::make_unique<sdk::BufferPool>(s, /*keep_per_shape=*/2);
    m_.reducer =
        std::make_unique<sharding::GradReducer>(ops_, config_, *m_.store, sharding, replica, data, *m_.comm_buffers);
    m_.reducer->set_experts(experts);
    if (distributed_optimizer_) {
      m_.publish = std::make_unique<sharding::HostParamSync>(ops_, *m_.store, *m_.comm_buffers);
    }
    AccelGroup* pipeline = ops_.group(ACCEL_GROUP_PIPELINE);
    m_.optimizer = std::make_unique<sharding::ShardedOptimizer>(ops_, *m_.store, sharding, sharding_shape.rank, tensor_,
                                                                pp_ > 1 ? pipeline : nullptr, experts);
    setup_pipeline(pipeline);
    m_.checkpoint = std::make_unique<sharding::CheckpointIo>(ops_, config_, *m_.store, sharding, ops_.shape(replica),
                                                             s.rank(), config_json(), tensor_.rank, experts);
  }

  void step_begin(const AccelStepArgs& args) override {
    if ((args.flags & ACCEL_STEP_EVAL) == 0) m_.store->zero_grads(ops_);
  }

  // A unit's gradients are complete (last micro-batch): with sequence
  // parallelism its whole parameters' partial gradients are summed over
  // TENSOR (each tensor rank saw a slice of the sequence: Megatron
  // all-reduces the sequence-parallel LayerNorm gradients the same way),
  // then the unit is averaged over the data group.
  void gradients_ready(const AccelGradientsReadyArgs& args) override {
    // The embedding's gradients wait for the head's part (finalize).
    if (args.unit == kEmbedding && embedding_group_ != nullptr) return;
    reduce_over_data(args.unit, args.grads);
  }

  // Megatron's embedding group: the first stage's embedding and the last
  // stage's tied copy of it (the head's token table) sum their gradients,
  // then both average them over the data group, so both step alike.
  void gradients_finalize(const AccelStepArgs& args) override {
    if (embedding_group_ != nullptr && (args.flags & ACCEL_STEP_EVAL) == 0) {
      const DLTensor* grads = ops_.storage(kEmbedding).grads;
      ops_.all_reduce(embedding_group_, grads, ACCEL_REDUCE_SUM, "megatron embedding group grad all_reduce");
      reduce_over_data(kEmbedding, grads);
    }
    m_.reducer->finish();
  }

  // A pipeline step: the schedule's micro-batches through the stages.
  void train_step(const AccelTrainStepArgs& args) override {
    if ((args.flags & ACCEL_TRAIN_STEP_EVAL) != 0) {
      runner_->evaluate(args.num_micro_batches);
      return;
    }
    const PipelineStepStats stats = runner_->run(args.num_micro_batches);
    last_peak_in_flight_ = stats.peak_in_flight;
    last_bubble_ = stats.step_seconds > 0 ? 1.0 - stats.busy_seconds / stats.step_seconds : 0.0;
  }

  void clip_gradients(const AccelClipArgs& args) override { m_.optimizer->clip_gradients(args); }

  // Megatron's weight-decay increment replaces the host's constant decay,
  // and its learning-rate schedule the host's when an lr_ field asked for it.
  void optimizer_step(const AccelOptimizerStepArgs& args) override {
    AccelOptimizerStepArgs step = args;
    const int64_t num = (args.step - 1) * global_batch_;  // Megatron counts samples
    step.weight_decay = weight_decay_at(wd_, num);
    if (lr_) step.lr = learning_rate_at(*lr_, num);
    last_weight_decay_ = step.weight_decay;
    last_lr_ = step.lr;
    m_.optimizer->step(step);
    if (m_.publish) m_.publish->publish();
  }

  void step_end(const AccelStepArgs&) override {
    const sdk::Services& s = services();
    m_.end_step(s);
    s.metric("tp_degree", static_cast<double>(tp_));
    s.metric("pp_degree", static_cast<double>(pp_));
    s.metric("cp_degree", static_cast<double>(cp_.degree()));
    s.metric("ep_degree", static_cast<double>(ep_));
    s.metric("pp_peak_in_flight", static_cast<double>(last_peak_in_flight_));
    s.metric("pp_bubble_fraction", last_bubble_);
    s.metric("data_parallel_size", static_cast<double>(data_size_));
    s.metric("weight_decay", last_weight_decay_);
    s.metric("lr", last_lr_);
    if (m_.publish) s.metric("param_allgather_elements", static_cast<double>(m_.publish->take_gathered_elements()));
  }

  void save_state(const AccelStateArgs& args) override { m_.checkpoint->save(args); }
  void load_state(const AccelStateArgs& args) override {
    m_.checkpoint->load(args);
    // The host loaded its parameters itself; the partitions were read from
    // the same tensors. Published anyway so every rank starts from exactly
    // the masters.
    if (m_.publish) m_.publish->publish();
  }

  void teardown() override {
    if (runner_) runner_->close();
    ops_.destroy_group(embedding_group_);
    m_.teardown();
  }

 private:
  // The ranks tensor and pipeline parallelism leave: world / (tp x pp),
  // data x context. Checked: tp x pp past int64 wrapped, to 0 (a division
  // by zero) or to a divisor of the world that then failed far away with
  // another message.
  static int64_t checked_data_ranks(const sdk::Services& s) {
    const int64_t tp = s.option<int64_t>("tp_degree"), pp = s.option<int64_t>("pp_degree");
    const int world = s.world_size();
    const std::optional<int64_t> model_parallel = sdk::checked_mul(tp, pp);
    if (!model_parallel || world % *model_parallel != 0) {
      throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                  "tp_degree " + std::to_string(tp) + " x pp_degree " + std::to_string(pp) +
                      " does not divide the world size " + std::to_string(world) +
                      " (world = pp_degree x data-parallel size x tp_degree)");
    }
    return world / *model_parallel;
  }

  // Megatron's split of a parameter: column-parallel weights by output rows
  // (their biases follow, split by the host), row-parallel weights by input
  // columns, the vocabulary by rows; -1 keeps it whole. lm_head.weight is a
  // tied reference: its owner wte.weight carries the split.
  static int32_t split_dim(const AccelParamInfo& param) {
    if (param.tied_unit >= 0) return -1;
    switch (param.hint) {
      case ACCEL_PARALLEL_COLUMN: return param.role == ACCEL_PARAM_BIAS ? -1 : 0;
      case ACCEL_PARALLEL_ROW: return param.role == ACCEL_PARAM_BIAS ? -1 : 1;
      case ACCEL_PARALLEL_VOCAB: return 0;
      default: return -1;
    }
  }

  // MegatronLMPlugin fields another setting serves (one line naming it), or
  // that need a model the host does not have (naming the model).
  static void refuse_unserved_fields(const sdk::Services& s) {
    static constexpr std::pair<const char*, const char*> host_served[] = {
        {"eval_iters", "give the host's --eval-steps (the one evaluation setting every strategy reads)"},
        {"eval_interval", "give the host's --eval-every (the one evaluation setting every strategy reads)"},
        {"train_iters", "give the host's --steps (the run's length every strategy reads)"},
        {"train_samples", "give the host's --steps = train_samples / --batch-size"},
        {"encoder_seq_length", "an encoder-decoder (T5) model's setting; the host runs decoder-only GPT-2 and Llama"},
        {"decoder_seq_length", "an encoder-decoder (T5) model's setting; the host runs decoder-only GPT-2 and Llama"},
        {"pipeline_model_parallel_split_rank",
         "the encoder/decoder split of an encoder-decoder (T5) model; the host runs decoder-only GPT-2 and Llama"},
    };
    for (const auto& [name, why] : host_served) {
      if (s.option_is_set(name)) throw Error(ACCEL_ERROR_INVALID_ARGUMENT, std::string(name) + ": " + why);
    }
    const std::string step = s.option<std::string>("train_step_class");
    if (step == "BertTrainStep" || step == "T5TrainStep") {
      throw Error(ACCEL_ERROR_UNSUPPORTED,
                  "train_step_class " + step + " needs a " + (step == "BertTrainStep" ? "BERT" : "T5 encoder-decoder") +
                      " model; the host runs decoder-only GPT-2 and Llama (GPTTrainStep)");
    }
    if (step != "GPTTrainStep") {
      throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                  "train_step_class " + step +
                      ": a custom train step is a Python class in Accelerate; here a plugin takes train_step over "
                      "(accel/plugin.h)");
    }
  }

  // a x b in samples (iterations x the global batch), or one line naming
  // what was multiplied when it leaves int64.
  static int64_t samples_product(int64_t a, int64_t b, const char* what) {
    const std::optional<int64_t> product = sdk::checked_mul(a, b);
    if (!product) {
      throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                  sdk::format("%s: %lld x %lld samples does not fit in a 64-bit count", what,
                              static_cast<long long>(a), static_cast<long long>(b)));
    }
    return *product;
  }

  // Megatron's OptimizerParamScheduler when any of its lr_ fields is given
  // (else the host's schedule stands): horizons in samples, iterations x G.
  void read_lr_schedule(const sdk::Services& s, int64_t global_batch, int64_t train_samples) {
    global_batch_ = global_batch;
    const char* fields[] = {"lr_decay_style",    "lr_decay_iters",     "lr_decay_samples", "lr_warmup_iters",
                            "lr_warmup_samples", "lr_warmup_fraction", "min_lr"};
    bool any = false;
    for (const char* f : fields) any = any || s.option_is_set(f);
    if (!any) return;
    const auto both = [&](const char* a, const char* b) {
      if (s.option_is_set(a) && s.option_is_set(b)) {
        throw Error(ACCEL_ERROR_INVALID_ARGUMENT, std::string(a) + " and " + b + " both set the same horizon; give one");
      }
    };
    both("lr_decay_iters", "lr_decay_samples");
    both("lr_warmup_iters", "lr_warmup_samples");
    both("lr_warmup_fraction", "lr_warmup_iters");
    both("lr_warmup_fraction", "lr_warmup_samples");
    LrSchedule lr;
    lr.style = s.option<std::string>("lr_decay_style");
    lr.max_lr = s.option<double>("train.lr");
    lr.min_lr = s.option_is_set("min_lr") ? s.option<double>("min_lr") : s.option<double>("train.min_lr");
    lr.decay_samples = s.option_is_set("lr_decay_samples") ? s.option<int64_t>("lr_decay_samples")
                       : s.option_is_set("lr_decay_iters")
                           ? samples_product(s.option<int64_t>("lr_decay_iters"), global_batch, "lr_decay_iters")
                                                           : train_samples;
    lr.warmup_samples =
        s.option_is_set("lr_warmup_samples") ? s.option<int64_t>("lr_warmup_samples")
        : s.option_is_set("lr_warmup_iters")
            ? samples_product(s.option<int64_t>("lr_warmup_iters"), global_batch, "lr_warmup_iters")
        : static_cast<int64_t>(s.option<double>("lr_warmup_fraction") * static_cast<double>(lr.decay_samples));
    if (lr.decay_samples <= lr.warmup_samples && lr.style != "constant") {
      throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                  sdk::format("the lr warmup (%lld samples) does not end before the decay horizon (%lld samples)",
                              static_cast<long long>(lr.warmup_samples), static_cast<long long>(lr.decay_samples)));
    }
    lr_ = lr;
    if (s.rank() == 0) {
      s.info() << "megatron: Megatron's lr schedule replaces the host's: " << lr.style << " from " << lr.max_lr
               << " to " << lr.min_lr << ", warmup " << lr.warmup_samples << " samples, decay over "
               << lr.decay_samples << " samples";
    }
  }

  // Expert parallelism's settings, refused at create on every rank alike.
  void check_expert_parallel(const sdk::Services& s) const {
    if (ep_ == 1) return;
    const int64_t data = checked_data_ranks(s);
    if (data % ep_ != 0) {
      throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                  sdk::format("ep_degree %lld does not divide the data-parallel size %lld (world / (tp_degree x "
                              "pp_degree)): expert groups are made of data ranks",
                              static_cast<long long>(ep_), static_cast<long long>(data)));
    }
    if (!sdk::host_abi_at_least(1, 12)) {
      throw Error(ACCEL_ERROR_UNSUPPORTED, "ep_degree needs a host with the expert group (ABI 1.12)");
    }
  }

  // The data group's average of a unit's gradients (sequence-parallel
  // partial sums first): all-reduced, or reduce-scattered into the
  // distributed optimizer's partition.
  void reduce_over_data(int32_t unit, const DLTensor* grads) {
    if (sequence_parallel_) sum_partial_gradients(unit);
    if (plan_.sharded(unit)) {
      m_.reducer->reduce_scatter(unit, /*last_micro_batch=*/true);
    } else {
      m_.reducer->all_reduce_replicated(unit, grads);
    }
  }

  // The stages (pp_degree, virtual stages) and the schedule, checked at
  // create so a bad layout is refused on every rank before anything runs.
  void plan_pipeline(const sdk::Services& s) {
    const AccelModelInfo* model = nullptr;
    s.check(s.table()->model->get_info(s.host(), &model), "get_info");
    const int64_t per_virtual = s.option<int64_t>("num_layers_per_virtual_pipeline_stage");
    const int64_t layers = model->num_units - 2;
    int32_t chunks = 1;
    if (per_virtual > 0) {
      if (pp_ == 1) {
        throw Error(ACCEL_ERROR_INVALID_ARGUMENT, "num_layers_per_virtual_pipeline_stage needs pp_degree > 1");
      }
      // Checked like tp x pp: a wrapped product divided the layers or by 0.
      const std::optional<int64_t> layers_per_round = sdk::checked_mul(pp_, per_virtual);
      if (!layers_per_round || layers % *layers_per_round != 0) {
        throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                    sdk::format("num_layers_per_virtual_pipeline_stage %lld: the model's %lld layers do not divide "
                                "into pp_degree %lld x virtual stages of %lld layers",
                                static_cast<long long>(per_virtual), static_cast<long long>(layers),
                                static_cast<long long>(pp_), static_cast<long long>(per_virtual)));
      }
      chunks = static_cast<int32_t>(layers / *layers_per_round);
    }
    schedule_ = chunks > 1 ? PipelineSchedule::interleaved : parse_pipeline_schedule(s.option<std::string>("pipeline_schedule"));
    if (chunks > 1 && s.option_is_set("pipeline_schedule") && s.option<std::string>("pipeline_schedule") == "gpipe") {
      throw Error(ACCEL_ERROR_INVALID_ARGUMENT, "pipeline_schedule gpipe runs one chunk per stage; virtual stages "
                                                "(num_layers_per_virtual_pipeline_stage) need the interleaved 1f1b");
    }
    try {
      stage_plan_ = plan_pipeline_stages(model->num_units, static_cast<int32_t>(pp_), chunks);
      // Every stage's schedule must take the micro-batch count.
      (void)pipeline_steps(schedule_, 0, static_cast<int32_t>(pp_),
                           static_cast<int32_t>(s.option<int64_t>("train.grad_accum_steps")), chunks);
    } catch (const std::invalid_argument& e) {
      throw Error(ACCEL_ERROR_INVALID_ARGUMENT, std::string("pp_degree ") + std::to_string(pp_) + ": " + e.what());
    }
  }

  // The runner of the pipeline step and, when the last stage holds a tied
  // copy of the embedding, the embedding group (first and last stage of
  // each pipeline).
  void setup_pipeline(AccelGroup* pipeline) {
    if (pp_ == 1) return;
    const AccelModelInfo* model = nullptr;
    services().check(services().table()->model->get_info(services().host(), &model), "get_info");
    // This rank's part of the sequence (cp), and its slice of that (sequence parallelism).
    const int64_t seq = model->seq_len / cp_.degree() / (sequence_parallel_ ? tp_ : 1);
    runner_ = std::make_unique<PipelineRunner>(ops_, stage_plan_, schedule_, pipeline,
                                               std::vector<int64_t>{seq, model->micro_batch_size,
                                                                    model->activation_shape[2]});
    if (!units_.back().tied_units.empty()) {
      const int32_t stage = runner_->stage();
      const bool member = stage == 0 || stage == pp_ - 1;
      embedding_group_ = ops_.split_group(pipeline, member ? 0 : -1, stage);
    }
  }

  void sum_partial_gradients(int32_t unit) {
    for (const sharding::ParamLayout& p : units_.at(static_cast<size_t>(unit)).params) {
      // Tensor slices hold their own gradients; whole parameters and
      // experts (whole over the tensor group) saw a slice of the sequence.
      if (p.is_split() && !sharding::is_expert_slice(p)) continue;
      const sdk::FlatView grad(*ops_.storage(unit).grads, p.flat_offset, p.numel);
      ops_.all_reduce(tensor_.group, grad.get(), ACCEL_REDUCE_SUM, "megatron sequence-parallel grad all_reduce");
    }
  }

  std::string config_json() const {
    return sdk::format(
        "{\"tp_degree\": %lld, \"sequence_parallelism\": %s, \"recompute_activations\": %s, "
        "\"use_distributed_optimizer\": %s, \"pp_degree\": %lld, \"virtual_stages\": %d, "
        "\"pipeline_schedule\": \"%s\", \"ep_degree\": %lld}",
        static_cast<long long>(tp_), sequence_parallel_ ? "true" : "false",
        full_recompute_ ? "\"full\"" : recompute_ ? "\"selective\"" : "false",
        distributed_optimizer_ ? "true" : "false", static_cast<long long>(pp_), stage_plan_.chunks,
        to_string(schedule_), static_cast<long long>(ep_));
  }

  WeightDecaySchedule wd_;
  std::optional<LrSchedule> lr_;
  int64_t global_batch_ = 1;
  double last_weight_decay_ = 0.0, last_lr_ = 0.0;
  const sdk::Kernels ops_;
  const int64_t tp_;
  const int64_t pp_;
  const sharding::ContextParallel cp_;
  const int64_t ep_;
  const bool sequence_parallel_;
  const bool recompute_;
  const bool full_recompute_;
  const bool distributed_optimizer_;
  sharding::ShardingOptions config_;
  sharding::GatherPlan plan_;
  std::vector<UnitLayout> units_;
  sharding::TensorGroup tensor_;
  sharding::Machinery m_;
  int32_t data_size_ = 1;
  // Pipeline parallelism (pipeline_schedule.h, pipeline_runner.h).
  static constexpr int32_t kEmbedding = 0;
  StagePlan stage_plan_;
  PipelineSchedule schedule_ = PipelineSchedule::one_f_one_b;
  std::unique_ptr<PipelineRunner> runner_;
  AccelGroup* embedding_group_ = nullptr;
  int32_t last_peak_in_flight_ = 0;
  double last_bubble_ = 0.0;
};

}  // namespace
}  // namespace accel::megatron

ACCEL_PLUGIN(accel::megatron::Megatron)
