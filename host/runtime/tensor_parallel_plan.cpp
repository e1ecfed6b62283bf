// Resolving tensor-parallel splits (see tensor_parallel_plan.h), and the
// model view's refresh of local shapes that follows them (ModelView's
// layout family lives here, so model_services.cpp keeps to its services).
#include "host/runtime/tensor_parallel_plan.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "host/comm/process_group.h"
#include "host/runtime/aten_buffer.h"
#include "host/runtime/comm_checks.h"
#include "host/runtime/model_services.h"
#include "host/runtime/service_support.h"
#include "host/util/strformat.h"

namespace accel::runtime {
namespace {

bool ends_with(const std::string& s, const char* suffix) {
  const std::string tail(suffix);
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The dimension Megatron splits a parameter of this hint along (-1: never).
int32_t hint_dim(model::ParallelHint hint, model::ParamRole role) {
  switch (hint) {
    case model::ParallelHint::column: return 0;
    case model::ParallelHint::row: return role == model::ParamRole::bias ? -1 : 1;
    case model::ParallelHint::vocab: return 0;
    case model::ParallelHint::replicated: return -1;
  }
  return -1;
}

// The model's collectives over the tensor group: the group's communicator,
// counted into context.tensor_parallel_bytes.
model::TensorGroup make_tensor_group(HostContext& context, comm::ProcessGroup& group) {
  model::TensorGroup tg;
  tg.size = group.size();
  tg.rank = group.rank();
  HostContext* ctx = &context;
  tg.all_reduce = [ctx, &group](at::Tensor& t, bool max) {
    const comm::Buffer buffer = buffer_of(t);
    complete_in_stream_order(group.all_reduce_async(buffer, buffer, max ? comm::ReduceOp::max : comm::ReduceOp::sum,
                                                    {0, "host tensor parallel"}),
                             buffer);
    ctx->tensor_parallel_bytes += static_cast<int64_t>(buffer.bytes());
  };
  // Along dim 0 of contiguous tensors; bytes counted as the comm services
  // count theirs: the gathered output, the scattered input (the full tensor).
  tg.all_gather = [ctx, &group](const at::Tensor& in) {
    std::vector<int64_t> shape(in.sizes().begin(), in.sizes().end());
    shape[0] *= group.size();
    at::Tensor out = at::empty(shape, in.options());
    const comm::Buffer input = buffer_of(in), output = buffer_of(out);
    complete_in_stream_order(group.all_gather_async(input, output, {0, "host sequence parallel"}), output);
    ctx->tensor_parallel_bytes += static_cast<int64_t>(output.bytes());
    return out;
  };
  tg.reduce_scatter = [ctx, &group](const at::Tensor& in) {
    std::vector<int64_t> shape(in.sizes().begin(), in.sizes().end());
    if (shape[0] % group.size() != 0) {
      throw std::runtime_error(strformat("sequence parallel: %lld positions do not split over %d ranks",
                                         static_cast<long long>(shape[0]), group.size()));
    }
    shape[0] /= group.size();
    at::Tensor out = at::empty(shape, in.options());
    const comm::Buffer input = buffer_of(in), output = buffer_of(out);
    complete_in_stream_order(
        group.reduce_scatter_async(input, output, comm::ReduceOp::sum, {0, "host sequence parallel"}), output);
    ctx->tensor_parallel_bytes += static_cast<int64_t>(input.bytes());
    return out;
  };
  return tg;
}

}  // namespace

void resolve_tensor_parallel_plan(HostContext& context) {
  const ModelPlan& plan = context.plan;
  if (plan.sequence_parallel && plan.splits.empty()) {
    throw std::runtime_error("the plugins' plan asks for sequence parallelism without tensor-parallel splits");
  }
  if (plan.splits.empty()) return;
  model::GptModel& model = *context.model;
  const model::GptConfig& config = model.config();
  const auto tensor_it = context.standard_groups.find(ACCEL_GROUP_TENSOR);
  if (tensor_it == context.standard_groups.end()) {
    throw std::runtime_error("the plugins' plan splits parameters, but the tensor group does not exist");
  }
  comm::ProcessGroup& group = *resolve_group(context, tensor_it->second).group;
  const int64_t parts = group.size(), index = group.rank();

  // Which (unit, param) the plugins asked to split, and along what.
  std::vector<std::vector<int32_t>> asked(model.units().size());
  for (size_t u = 0; u < model.units().size(); ++u) asked[u].assign(model.units()[u].params().size(), -1);
  for (const ModelPlan::Split& split : plan.splits) {
    const auto u = static_cast<size_t>(split.unit);
    if (split.group != "tensor") {
      throw std::runtime_error(strformat("plan_split_param over the %s group: this host splits parameters over the "
                                         "tensor group only",
                                         split.group.c_str()));
    }
    if (u >= asked.size() || static_cast<size_t>(split.param) >= asked[u].size()) {
      throw std::runtime_error("plan_split_param names lm_head.weight's owner only through wte.weight");
    }
    asked[u][static_cast<size_t>(split.param)] = split.dim;
  }
  // A mixture of experts keeps its router and experts whole under tensor
  // parallelism (their hints are replicated): every tensor rank routes and
  // runs the tokens it holds (all of them; its sequence slice under
  // sequence parallelism, whose partial gradients the strategy sums).
  // The auxiliary losses are products of means over tokens: a sequence
  // slice's would not be the sequence's.
  if (config.has_experts() && plan.sequence_parallel && model.moe_losses_on()) {
    throw std::runtime_error("--moe-aux-loss-coef and --moe-z-loss-coef with sequence parallelism: each tensor rank "
                             "routes a slice of the sequence, whose load-balancing loss is not the sequence's; "
                             "leave sequence_parallelism off");
  }
  // q_norm and k_norm are replicated but each tensor rank norms only its
  // heads: their gradients would be partial sums no strategy adds up.
  // (One tensor rank, as megatron's pipeline-only plans post, holds every head.)
  if (config.qk_norm && parts > 1) {
    throw std::runtime_error("tensor parallelism does not serve qk_norm (Qwen3's per-head q/k norms): their "
                             "gradients are split over the heads; use fsdp, deepspeed_zero or pipeline stages");
  }
  // OLMo 2's q/k norms take their statistics over the whole projection,
  // which each tensor rank holds only its heads of.
  if (config.block.qk_norm_whole && parts > 1) {
    throw std::runtime_error("tensor parallelism does not serve qk_norm_whole (OLMo 2's q/k norms over the whole "
                             "projection): each rank holds its heads only; use fsdp, deepspeed_zero or pipeline stages");
  }
  if (config.family == model::ModelFamily::llama && config.n_kv_head % parts != 0) {
    throw std::runtime_error(strformat("tensor parallel size %lld does not divide the %lld key/value heads",
                                       static_cast<long long>(parts), static_cast<long long>(config.n_kv_head)));
  }
  if (config.n_head % parts != 0) {
    throw std::runtime_error(strformat("tensor parallel size %lld does not divide the %lld attention heads",
                                       static_cast<long long>(parts), static_cast<long long>(config.n_head)));
  }

  // All or nothing, each along its hint's dimension: the host runs one layout.
  for (size_t u = 0; u < model.units().size(); ++u) {
    model::Unit& unit = model.units()[u];
    std::vector<model::ParamSplit> splits(unit.params().size());
    for (size_t p = 0; p < unit.params().size(); ++p) {
      const model::Param& param = unit.params()[p];
      int32_t want = hint_dim(param.spec.hint, param.spec.role);
      const int32_t got = asked[u][p];
      // A column linear's bias splits with its weight (accel/model.h), asked or not.
      const bool column_bias =
          param.spec.hint == model::ParallelHint::column && param.spec.role == model::ParamRole::bias;
      if (!column_bias && got != want) {
        throw std::runtime_error(
            want < 0 ? strformat("plan_split_param splits %s (%s), which Megatron's layout keeps whole",
                                 param.spec.name.c_str(), model::to_string(param.spec.hint))
                     : strformat("the tensor-parallel plan %s %s along dimension %d; the host runs Megatron's layout, "
                                 "which splits every %s parameter along dimension %d",
                                 got < 0 ? "leaves" : "splits", param.spec.name.c_str(), got < 0 ? want : got,
                                 model::to_string(param.spec.hint), want));
      }
      if (param.spec.hint == model::ParallelHint::column) want = 0;  // weight and bias
      if (want < 0) continue;
      model::ParamSplit& s = splits[p];
      s.dim = want;
      s.parts = parts;
      s.index = index;
      const int64_t size = param.spec.shape[static_cast<size_t>(want)];
      if (ends_with(param.spec.name, ".attn.c_attn.weight") || ends_with(param.spec.name, ".attn.c_attn.bias")) {
        s.stride = 3;  // Q, K, V stacked: by heads
      }
      if (param.spec.hint == model::ParallelHint::vocab) {
        s.padded = (size + parts - 1) / parts * parts;  // make-vocab-size-divisible-by
      } else if (size % (parts * s.stride) != 0) {
        throw std::runtime_error(strformat("tensor parallel size %lld does not divide %s's dimension %d (%lld)",
                                           static_cast<long long>(parts), param.spec.name.c_str(), want,
                                           static_cast<long long>(size / s.stride)));
      }
    }
    unit.split_params(splits);
  }
  if (plan.sequence_parallel && config.seq_len % parts != 0) {
    throw std::runtime_error(strformat("sequence parallelism: tensor parallel size %lld does not divide seq_len %lld",
                                       static_cast<long long>(parts), static_cast<long long>(config.seq_len)));
  }
  context.tensor_parallel_size = parts;
  model::TensorGroup tensor_group = make_tensor_group(context, group);
  tensor_group.sequence_parallel = plan.sequence_parallel;
  model.set_tensor_group(std::move(tensor_group));
  if (context.model_view) context.model_view->refresh_layout();
}

AccelStatus plan_sequence_parallel(AccelHost* host, AccelGroupKind over) {
  return call_service("plan_sequence_parallel", [&] {
    HostContext& context = context_of(host);
    if (!context.planning) fail(ACCEL_ERROR_FAILED_PRECONDITION, "allowed only inside the plan_model hook");
    if (over != ACCEL_GROUP_TENSOR) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT,
           strformat("group kind %d: sequence parallelism runs over ACCEL_GROUP_TENSOR", static_cast<int>(over)));
    }
    context.plan.sequence_parallel = true;
  });
}

int64_t tensor_parallel_size(const HostContext& context) { return context.tensor_parallel_size; }

int64_t take_tensor_parallel_bytes(HostContext& context) { return context.tensor_parallel_bytes.exchange(0); }

// ---------------------------------------------------------------------------
// ModelView: local shapes after the splits resolved (model_services.h)
// ---------------------------------------------------------------------------

void ModelView::refresh_layout() {
  const auto& units = model_->units();
  for (size_t u = 0; u < units_.size(); ++u) {
    UnitEntry& entry = *units_[u];
    entry.info.numel = units[u].numel();
    const auto& params = units[u].params();
    for (size_t p = 0; p < entry.params.size(); ++p) {
      ParamEntry& pe = *entry.params[p];
      // The tied reference follows its owner (wte.weight).
      const bool tied = pe.info.tied_unit >= 0;
      const model::Param& param = tied ? units[static_cast<size_t>(pe.info.tied_unit)].params().at(
                                             static_cast<size_t>(pe.info.tied_index))
                                       : params.at(p);
      // Sizes stay the same, so the arrays handed out stay valid.
      pe.local_shape = param.shape;
      std::fill(pe.local_offset.begin(), pe.local_offset.end(), 0);
      if (param.split.active()) {
        pe.local_offset[static_cast<size_t>(param.split.dim)] = param.split.local_offset(param.spec.shape);
      }
      pe.info.local_shape = pe.local_shape.data();
      pe.info.local_offset = pe.local_offset.data();
      pe.info.numel = param.numel();
      if (!tied) pe.info.flat_offset = param.offset;
      pe.info.split_dim = param.split.active() ? param.split.dim : -1;
      pe.info.split_group = param.split.active() ? ACCEL_GROUP_TENSOR : ACCEL_GROUP_WORLD;
      pe.info.split_blocks = param.split.active() ? static_cast<int32_t>(param.split.stride) : 1;
      pe.info.split_parts = param.split.active() ? static_cast<int32_t>(param.split.parts) : 1;
    }
  }
}

}  // namespace accel::runtime
