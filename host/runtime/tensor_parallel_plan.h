// Resolving the tensor-parallel splits plugins recorded while planning
// (accel/model.h plan_split_param) into the host model: local shapes,
// offsets and flat layouts of every split parameter, and the model run
// tensor-parallel over the TENSOR standard group (host/model/tensor_parallel.h).
//
// The host runs Megatron's layout of its GPT blocks, so a plan is all or
// nothing: every COLUMN / ROW / VOCAB parameter split along its hint's
// dimension over the tensor group, or none. The fused c_attn (Q, K, V
// stacked) splits by heads (stride 3); wte is padded to a multiple of the
// group size (make-vocab-size-divisible-by), its padded rows zero.
//
// Thread-safety: loop thread, once, between plan_model and the host's
// materialisation of units; collective over the world (every rank resolves
// the same plan).
#pragma once

#include <cstdint>

#include "host/runtime/host_context.h"

namespace accel::runtime {

// Checks and applies context.plan.splits to context.model (before any unit
// has storage) and refreshes the model view's shapes. Throws
// std::runtime_error naming the parameter or the limit when the plan does
// not fit (a partial plan, a group other than tensor, heads or widths the
// group size does not divide). A no-op without splits.
void resolve_tensor_parallel_plan(HostContext& context);

// The model service plan_sequence_parallel (accel/model.h, since 1.4):
// records the request for resolve_tensor_parallel_plan. Phase: plan.
AccelStatus plan_sequence_parallel(AccelHost* host, AccelGroupKind over);

// The tensor group's size once resolved (1 without tensor parallelism).
int64_t tensor_parallel_size(const HostContext& context);

// Bytes the host's tensor-parallel collectives moved since the last call
// (an all_reduce counts its buffer once, as the comm services count theirs).
int64_t take_tensor_parallel_bytes(HostContext& context);

}  // namespace accel::runtime
