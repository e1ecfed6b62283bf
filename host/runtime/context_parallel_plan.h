// Resolving the context parallelism a plugin planned (accel/model.h
// plan_context_parallel) into the host model: the ring and all-to-all
// sub-groups of ACCEL_GROUP_CONTEXT, the checks of heads and sequence length
// against them, and the model's ContextGroup (host/model/context_parallel.h)
// whose exchanges run on those groups and count their bytes.
//
// Thread-safety: loop thread, once, after the standard groups and the
// tensor-parallel splits resolved; collective over the world (every rank
// resolves the same plan).
#pragma once

#include <accel/model.h>

#include <cstdint>

#include "host/runtime/host_context.h"

namespace accel::runtime {

// The model service plan_context_parallel (since 1.10): records the request.
// Phase: plan.
AccelStatus plan_context_parallel(AccelHost* host, const AccelContextParallelSpec* spec);

// Applies the plan to context.model. Throws std::runtime_error with one line
// when the mesh and the plan disagree (a context size without a plan, or a
// plan without one), or the model does not split as asked (heads a2a does
// not divide, a sequence the layout cannot cut). A no-op when neither asks.
void resolve_context_parallel_plan(HostContext& context);

// Bytes this rank's context exchanges sent since the last call: each ring
// hop's message, each all-to-all's input less the chunk it keeps.
int64_t take_context_parallel_bytes(HostContext& context);

}  // namespace accel::runtime
