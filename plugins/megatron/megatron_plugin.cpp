// megatron — Megatron-LM's tensor parallelism (accelerate's MegatronLMPlugin,
// part 1). The plugin plans; the host runs:
//   - plan_model declares the mesh (tensor = tp_degree, the rest of the world
//     data parallel: world = T x D) and splits every COLUMN, ROW and VOCAB
//     parameter over the tensor group along its hint's dimension; the host
//     resolves the splits and runs the model with Megatron's f / g operators,
//     the vocab-parallel embedding and the vocab-parallel cross-entropy
//     (host/model/tensor_parallel.h). No rank holds the full logits.
//   - gradients_finalize averages every gradient over the data group. Within
//     a tensor group the replicated parameters' gradients (norms, row biases,
//     wpe) are already equal: their inputs' gradients passed a g operator's
//     all-reduce (f in backward), so nothing is reduced over TENSOR.
//   - clip_gradients takes the global norm over tensor and data groups,
//     counting each parameter once: split parameters by every tensor rank
//     (each holds a distinct part), replicated ones by tensor rank 0 only.
//   - sequence_parallelism: the host splits LayerNorm / residual regions
//     along the sequence (model->plan_sequence_parallel); the gradients of
//     the whole parameters there are summed over TENSOR first.
//   - recompute_activations: full recompute of every block (the host's
//     activation checkpointing), the f / g collectives run again.
// Every MegatronLMPlugin field, implemented or refused with its reason:
// plugins/megatron/README.md.
//
// Built with the SDK against the ABI headers alone. Hooks run on the host's
// loop thread only.
#include <accel/sdk/sdk.hpp>

#include <cmath>
#include <string>
#include <vector>

namespace {

using accel::sdk::Error;
using accel::sdk::ScalarView;

class Megatron final : public accel::sdk::Plugin {
 public:
  static constexpr accel::sdk::PluginInfo info{
      "megatron", "0.1.0",
      "Megatron-LM tensor and sequence parallelism: column/row-parallel blocks, vocab-parallel embedding and loss "
      "(MegatronLMPlugin)",
      ACCEL_PLUGIN_PARALLEL,
      ACCEL_CAP_CPU | ACCEL_CAP_CUDA | ACCEL_CAP_REDUCES_GRADS | ACCEL_CAP_TENSOR_PARALLEL,
      "ddp,fsdp,deepspeed_zero"};

  static constexpr accel::sdk::Option options[] = {
      {"tp_degree", ACCEL_OPTION_INT, "1", "tensor-parallel degree T: ranks splitting each layer (world = T x data)",
       nullptr, "1"},
      {"pp_degree", ACCEL_OPTION_INT, "1", "pipeline-parallel degree; only 1 (pipeline parallelism is part 2)",
       nullptr, "1"},
      {"sequence_parallelism", ACCEL_OPTION_BOOL, "false",
       "split LayerNorm and dropout regions along the sequence (needs tp_degree > 1)"},
      {"recompute_activations", ACCEL_OPTION_BOOL, "false",
       "recompute every block's activations in backward (full recompute)"},
      {"use_distributed_optimizer", ACCEL_OPTION_BOOL, "false",
       "partition AdamW state over the data group; not available yet"},
      {"gradient_clipping", ACCEL_OPTION_DOUBLE, "0",
       "refused when given: the host's --grad-clip is the one global-norm clip setting", nullptr, "0"},
      {"num_micro_batches", ACCEL_OPTION_INT, "1",
       "refused when given: the host's --grad-accum is the one accumulation setting", nullptr, "1"},
  };

  explicit Megatron(const accel::sdk::Services& s)
      : Plugin(s),
        kernels_(services()),
        tp_(s.option<int64_t>("tp_degree")),
        sequence_parallel_(s.option<bool>("sequence_parallelism")),
        recompute_(s.option<bool>("recompute_activations")) {
    const int world = s.world_size();
    if (s.option<int64_t>("pp_degree") != 1) {
      throw Error(ACCEL_ERROR_UNSUPPORTED,
                  "pp_degree " + std::to_string(s.option<int64_t>("pp_degree")) +
                      ": pipeline parallelism is not available yet (only pp_degree 1)");
    }
    if (world % tp_ != 0) {
      throw Error(ACCEL_ERROR_INVALID_ARGUMENT, "tp_degree " + std::to_string(tp_) +
                                                    " does not divide the world size " + std::to_string(world) +
                                                    " (world = tp_degree x data-parallel size)");
    }
    if (sequence_parallel_ && tp_ == 1) {
      throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                  "sequence_parallelism needs tp_degree > 1 (it splits the tensor group's replicated regions)");
    }
    if (sequence_parallel_ && !ACCEL_HAS_FN(s.table()->model, AccelModelServices, plan_sequence_parallel)) {
      throw Error(ACCEL_ERROR_UNSUPPORTED,
                  "sequence_parallelism needs a host with model->plan_sequence_parallel (ABI 1.4)");
    }
    if (s.option<bool>("use_distributed_optimizer")) {
      throw Error(ACCEL_ERROR_UNSUPPORTED,
                  "use_distributed_optimizer is not available yet: it will reuse the shared sharding library "
                  "(plugins/sharding) once that lands");
    }
    if (s.option_is_set("gradient_clipping")) {
      throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                  "gradient_clipping: give the host's --grad-clip (the one clipping setting every strategy reads)");
    }
    if (s.option_is_set("num_micro_batches")) {
      throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                  "num_micro_batches: give the host's --grad-accum (the one accumulation setting)");
    }
  }

  void plan_model(const AccelPlanArgs&) override {
    const AccelHostServices& t = *services().table();
    AccelMeshSpec mesh{};
    mesh.struct_size = sizeof(mesh);
    mesh.tensor_size = static_cast<int32_t>(tp_);
    services().check(t.comm->set_mesh(services().host(), &mesh), "set_mesh");
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
      if (recompute_ && unit->kind == ACCEL_UNIT_BLOCK) {
        services().check(t.model->set_checkpointing(services().host(), u, true), "set_checkpointing");
      }
    }
  }

  void setup(const AccelSetupArgs&) override {
    data_ = kernels_.group(ACCEL_GROUP_DATA);
    tensor_ = kernels_.group(ACCEL_GROUP_TENSOR);
    data_size_ = kernels_.shape(data_).size;
    const accel::sdk::GroupShape tensor = kernels_.shape(tensor_);
    tensor_rank_ = tensor.rank;
    if (tensor.size != tp_) {
      throw Error(ACCEL_ERROR_INTERNAL, "the tensor group has " + std::to_string(tensor.size) +
                                            " ranks, tp_degree is " + std::to_string(tp_));
    }
    const AccelModelInfo* model = nullptr;
    services().check(services().table()->model->get_info(services().host(), &model), "get_info");
    num_units_ = model->num_units;
  }

  void gradients_finalize(const AccelStepArgs&) override {
    // Sequence parallel: each tensor rank saw its slice of the sequence in
    // the norms, residual biases and position embeddings, so their gradients
    // are partial sums over the group (Megatron all-reduces the
    // sequence-parallel LayerNorm gradients the same way).
    if (sequence_parallel_) {
      const AccelModelServices& model = *services().table()->model;
      for (int32_t u = 0; u < num_units_; ++u) {
        const AccelUnitInfo* unit = nullptr;
        services().check(model.get_unit(services().host(), u, &unit), "get_unit");
        for (int32_t p = 0; p < unit->num_params; ++p) {
          const AccelParamInfo* param = nullptr;
          services().check(model.get_param(services().host(), u, p, &param), "get_param");
          if (param->tied_unit >= 0 || param->split_dim >= 0) continue;
          const DLTensor* grad = nullptr;
          services().check(model.get_param_view(services().host(), u, p, ACCEL_STORAGE_GRADS, &grad),
                           "get_param_view");
          kernels_.all_reduce(tensor_, grad, ACCEL_REDUCE_SUM, "megatron sequence-parallel grad all_reduce");
        }
      }
    }
    if (data_size_ == 1) return;
    for (int32_t u = 0; u < num_units_; ++u) {
      const DLTensor* grads = kernels_.storage(u).grads;
      if (grads != nullptr) kernels_.all_reduce(data_, grads, ACCEL_REDUCE_AVG, "megatron data all_reduce");
    }
  }

  void clip_gradients(const AccelClipArgs& args) override {
    const AccelHostServices& t = *services().table();
    // This rank's share of the squared norm: split parameters on every
    // tensor rank, replicated ones on tensor rank 0 (summed over TENSOR
    // below, each counts once; data-parallel replicas are equal and not summed).
    std::vector<const DLTensor*> counted, scaled;
    for (int32_t u = 0; u < num_units_; ++u) {
      const DLTensor* grads = kernels_.storage(u).grads;
      if (grads == nullptr) continue;
      scaled.push_back(grads);
      const AccelUnitInfo* unit = nullptr;
      services().check(t.model->get_unit(services().host(), u, &unit), "get_unit");
      for (int32_t p = 0; p < unit->num_params; ++p) {
        const AccelParamInfo* param = nullptr;
        services().check(t.model->get_param(services().host(), u, p, &param), "get_param");
        if (param->tied_unit >= 0) continue;  // lm_head.weight is wte.weight
        if (param->split_dim < 0 && tensor_rank_ != 0) continue;
        const DLTensor* view = nullptr;
        services().check(t.model->get_param_view(services().host(), u, p, ACCEL_STORAGE_GRADS, &view),
                         "get_param_view");
        counted.push_back(view);
      }
    }
    float local = 0.0f;
    const ScalarView local_view(&local);
    AccelSquaredNormArgs norm{};
    norm.struct_size = sizeof(norm);
    norm.inputs = counted.data();
    norm.num_inputs = static_cast<int32_t>(counted.size());
    norm.output = local_view.get();
    norm.stream = args.stream;
    services().check(t.kernels->squared_norm(services().host(), &norm), "squared_norm");
    double global = local;
    DLTensor total{};
    int64_t unused = 0;
    total.data = &global;
    total.device = {kDLCPU, 0};
    total.dtype = DLDataType{kDLFloat, 64, 1};
    total.shape = &unused;
    total.strides = &unused;
    kernels_.all_reduce(tensor_, &total, ACCEL_REDUCE_SUM, "megatron grad norm all_reduce");
    float global32 = static_cast<float>(global);
    const ScalarView global_view(&global32);
    AccelClipScaleArgs clip{};
    clip.struct_size = sizeof(clip);
    clip.tensors = scaled.data();
    clip.num_tensors = static_cast<int32_t>(scaled.size());
    clip.total_squared_norm = global_view.get();
    clip.total_norm = args.total_norm;
    clip.max_norm = args.max_norm;
    clip.stream = args.stream;
    services().check(t.kernels->clip_scale(services().host(), &clip), "clip_scale");
  }

  void step_end(const AccelStepArgs&) override {
    services().metric("tp_degree", static_cast<double>(tp_));
    services().metric("data_parallel_size", static_cast<double>(data_size_));
  }

 private:
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

  const accel::sdk::Kernels kernels_;
  const int64_t tp_;
  const bool sequence_parallel_;
  const bool recompute_;
  AccelGroup* data_ = nullptr;
  AccelGroup* tensor_ = nullptr;
  int32_t data_size_ = 1;
  int32_t tensor_rank_ = 0;
  int32_t num_units_ = 0;
};

}  // namespace

ACCEL_PLUGIN(Megatron)
