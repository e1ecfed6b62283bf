// Context parallelism's plan and its resolution (see context_parallel_plan.h).
#include "host/runtime/context_parallel_plan.h"

#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "host/comm/process_group.h"
#include "host/runtime/aten_buffer.h"
#include "host/runtime/comm_checks.h"
#include "host/runtime/service_support.h"
#include "host/util/strformat.h"

namespace accel::runtime {
namespace {

const char* comm_type_name(int32_t type) {
  switch (type) {
    case ACCEL_CONTEXT_P2P: return "p2p";
    case ACCEL_CONTEXT_A2A: return "a2a";
    case ACCEL_CONTEXT_A2A_P2P: return "a2a+p2p";
    case ACCEL_CONTEXT_ALL_GATHER: return "all_gather";
    default: return "?";
  }
}

// The model's exchanges over the sub-groups, their bytes counted.
model::ContextGroup make_context_group(HostContext& context, comm::ProcessGroup* ring, comm::ProcessGroup* a2a,
                                       bool gather_ring) {
  model::ContextGroup g;
  HostContext* ctx = &context;
  if (a2a != nullptr) {
    g.a2a_size = a2a->size();
    g.a2a_rank = a2a->rank();
    g.all_to_all = [ctx, a2a](const at::Tensor& input) {
      at::Tensor output = at::empty_like(input);
      complete_in_stream_order(
          a2a->all_to_all_async(buffer_of(input), buffer_of(output), {0, "host context parallel all_to_all"}),
          buffer_of(output));
      // What left this rank: every chunk but its own.
      ctx->context_parallel_bytes += static_cast<int64_t>(input.nbytes() / a2a->size() * (a2a->size() - 1));
      return output;
    };
  }
  if (ring != nullptr) {
    g.ring_size = ring->size();
    g.ring_rank = ring->rank();
    g.ring_pass = [ctx, ring](const at::Tensor& tensor, int tag) -> model::ContextGroup::Transfer {
      at::Tensor received = at::empty_like(tensor);
      const int n = ring->size(), me = ring->rank();
      const comm::P2POp ops[2] = {{comm::P2POp::Kind::send, buffer_of(tensor), (me + 1) % n, tag},
                                  {comm::P2POp::Kind::recv, buffer_of(received), (me + n - 1) % n, tag}};
      std::shared_ptr<comm::Work> work = ring->batch_p2p_async(ops, {0, "host context parallel ring"});
      ctx->context_parallel_bytes += static_cast<int64_t>(tensor.nbytes());
      // The sent tensor stays alive until the hop completed.
      return [work, tensor, received]() {
        complete_in_stream_order(work, buffer_of(received));
        return received;
      };
    };
  }
  if (ring != nullptr && gather_ring) {
    g.gather_ring = true;
    // What left this rank: its block to each of the others (a ring
    // all-gather's n - 1 sends); the reduce-scatter likewise.
    g.ring_all_gather = [ctx, ring](const at::Tensor& block) {
      const int64_t n = ring->size();
      std::vector<int64_t> shape{n};
      shape.insert(shape.end(), block.sizes().begin(), block.sizes().end());
      at::Tensor gathered = at::empty(shape, block.options());
      complete_in_stream_order(
          ring->all_gather_async(buffer_of(block), buffer_of(gathered), {0, "host context parallel all_gather"}),
          buffer_of(gathered));
      ctx->context_parallel_bytes += static_cast<int64_t>(block.nbytes()) * (n - 1);
      return gathered;
    };
    g.ring_reduce_scatter = [ctx, ring](const at::Tensor& blocks) {
      const int64_t n = ring->size();
      at::Tensor mine = at::empty(blocks.sizes().slice(1), blocks.options());
      complete_in_stream_order(ring->reduce_scatter_async(buffer_of(blocks), buffer_of(mine), comm::ReduceOp::sum,
                                                          {0, "host context parallel reduce_scatter"}),
                               buffer_of(mine));
      ctx->context_parallel_bytes += static_cast<int64_t>(mine.nbytes()) * (n - 1);
      return mine;
    };
  }
  g.size = g.ring_size * g.a2a_size;
  g.rank = g.ring_rank * g.a2a_size + g.a2a_rank;
  return g;
}

// The largest divisor of `size` below it that divides both head counts.
int32_t largest_a2a_size(int64_t size, int64_t heads, int64_t kv_heads) {
  for (int64_t d = size / 2; d >= 2; --d) {
    if (size % d == 0 && heads % d == 0 && kv_heads % d == 0) return static_cast<int32_t>(d);
  }
  return 0;
}

}  // namespace

AccelStatus plan_context_parallel(AccelHost* host, const AccelContextParallelSpec* spec) {
  return call_service("plan_context_parallel", [&] {
    ACCEL_REQUIRE_ARGS(spec, AccelContextParallelSpec, a2a_size);
    HostContext& context = context_of(host);
    if (!context.planning) fail(ACCEL_ERROR_FAILED_PRECONDITION, "allowed only inside the plan_model hook");
    if (spec->comm_type < ACCEL_CONTEXT_P2P || spec->comm_type > ACCEL_CONTEXT_ALL_GATHER) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, strformat("comm_type %d is not an AccelContextCommType", spec->comm_type));
    }
    if (spec->a2a_size < 0 || (spec->comm_type != ACCEL_CONTEXT_A2A_P2P && spec->a2a_size != 0)) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, strformat("a2a_size %d: only a2a+p2p takes one (0 otherwise)", spec->a2a_size));
    }
    if (context.plan.context_parallel) fail(ACCEL_ERROR_INVALID_ARGUMENT, "context parallelism was planned already");
    AccelContextParallelSpec copy = *spec;
    copy.struct_size = sizeof(copy);
    copy.extensions = nullptr;
    context.plan.context_parallel = copy;
  });
}

void resolve_context_parallel_plan(HostContext& context) {
  const std::optional<AccelContextParallelSpec>& plan = context.plan.context_parallel;
  const int context_size = std::max(1, context.mesh.context_size);
  if (!plan && context_size == 1) return;
  if (!plan) {
    throw std::runtime_error(strformat("the mesh's context size is %d, but no plugin planned context parallelism "
                                       "(model->plan_context_parallel)", context_size));
  }
  if (context_size == 1) {
    throw std::runtime_error("plan_context_parallel without a mesh context size above 1 (set_mesh's context_size)");
  }
  const auto standard = context.standard_groups.find(ACCEL_GROUP_CONTEXT);
  if (standard == context.standard_groups.end()) {
    throw std::runtime_error("context parallelism needs ranks: run under mpirun or accel-host launch");
  }
  comm::ProcessGroup& group = *resolve_group(context, standard->second).group;
  model::GptModel& model = *context.model;
  const model::GptConfig& config = model.config();
  // The ring and the all-to-all attend over whole causal prefixes; a window
  // would need their blocks masked (every rank reads the same config, so
  // every rank refuses alike).
  if (config.sliding_window > 0) {
    throw std::runtime_error(strformat("context parallelism does not serve sliding_window %lld (Mistral's window); "
                                       "run without a context group",
                                       static_cast<long long>(config.sliding_window)));
  }
  // The ring's blocks run the flash kernels at 1/sqrt(head_dim), uncapped.
  if (config.block.query_pre_attn_scalar > 0) {
    throw std::runtime_error(strformat("context parallelism does not serve query_pre_attn_scalar %g (Gemma's softmax "
                                       "scale); run without a context group",
                                       config.block.query_pre_attn_scalar));
  }
  if (config.block.attn_logit_softcap > 0) {
    throw std::runtime_error(strformat("context parallelism does not serve attn_logit_softcap %g (Gemma 2's capped "
                                       "attention logits); run without a context group",
                                       config.block.attn_logit_softcap));
  }
  if (config.attention_multiplier > 0.0) {
    throw std::runtime_error(strformat("context parallelism does not serve attention_multiplier %g (Granite's "
                                       "softmax scale); run without a context group",
                                       config.attention_multiplier));
  }
  // This rank's heads once the tensor-parallel splits resolved.
  const int64_t tensor = context.tensor_parallel_size;
  const int64_t heads = config.n_head / tensor;
  const int64_t kv_heads = (config.family == model::ModelFamily::llama ? config.n_kv_head : config.n_head) / tensor;
  int64_t a2a = 1;
  switch (plan->comm_type) {
    case ACCEL_CONTEXT_A2A: a2a = context_size; break;
    case ACCEL_CONTEXT_A2A_P2P: {
      a2a = plan->a2a_size != 0 ? plan->a2a_size : largest_a2a_size(context_size, heads, kv_heads);
      if (a2a < 2 || a2a > context_size / 2 || context_size % a2a != 0) {
        throw std::runtime_error(
            plan->a2a_size != 0
                ? strformat("context parallelism a2a+p2p: the all-to-all size %lld is not a divisor of the context "
                            "size %d between 2 and %d",
                            static_cast<long long>(a2a), context_size, context_size / 2)
                : strformat("context parallelism a2a+p2p: no divisor of the context size %d between 2 and %d "
                            "divides this rank's %lld query and %lld key/value heads",
                            context_size, context_size / 2, static_cast<long long>(heads),
                            static_cast<long long>(kv_heads)));
      }
      break;
    }
    default: break;
  }
  if (heads % a2a != 0 || kv_heads % a2a != 0) {
    throw std::runtime_error(strformat(
        "context parallelism %s: the all-to-all over %lld ranks splits heads, and this rank holds %lld query and "
        "%lld key/value heads (n_head / tp_degree, n_kv_head / tp_degree): give a degree that divides both",
        comm_type_name(plan->comm_type), static_cast<long long>(a2a), static_cast<long long>(heads),
        static_cast<long long>(kv_heads)));
  }
  const int rank = group.rank();
  comm::ProcessGroup* ring = nullptr;
  comm::ProcessGroup* a2a_group = nullptr;
  if (a2a == context_size) {
    a2a_group = &group;
  } else if (a2a == 1) {
    ring = &group;
  } else {
    // Adjacent context ranks form an all-to-all sub-group; the ring joins
    // the ranks with the same place in theirs.
    const auto a = static_cast<int>(a2a);
    context.context_a2a_group = group.split(rank / a, rank, "context all_to_all");
    context.context_ring_group = group.split(rank % a, rank, "context ring");
    a2a_group = context.context_a2a_group.get();
    ring = context.context_ring_group.get();
  }
  model::ContextGroup cp = make_context_group(context, ring, a2a_group, plan->comm_type == ACCEL_CONTEXT_ALL_GATHER);
  const std::string problem = cp.layout_problem(config.seq_len);
  if (!problem.empty()) throw std::runtime_error(problem + " (--seq-len)");
  const model::TensorGroup& tp = model.tensor_group();
  if (tp.sequence_split() && (config.seq_len / context_size) % tp.size != 0) {
    throw std::runtime_error(strformat("sequence parallelism under context parallelism: tensor parallel size %lld "
                                       "does not divide each rank's %lld positions (seq_len %lld / context %d)",
                                       static_cast<long long>(tp.size),
                                       static_cast<long long>(config.seq_len / context_size),
                                       static_cast<long long>(config.seq_len), context_size));
  }
  context.context_parallel_size = context_size;
  model.set_context_group(std::move(cp));
}

int64_t take_context_parallel_bytes(HostContext& context) { return context.context_parallel_bytes.exchange(0); }

}  // namespace accel::runtime
