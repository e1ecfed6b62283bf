// Resolving the expert parallelism a plugin declared (AccelMeshSpec
// expert_size, ABI 1.12) into the host model: every ACCEL_PARAM_EXPERTS
// parameter split along dim 0 (the experts) over ACCEL_GROUP_EXPERT, E /
// size consecutive experts per rank, and the model's ExpertGroup
// (host/model/expert_parallel.h) whose token exchanges run on that group
// and count their bytes.
//
// Thread-safety: loop thread, once, after the standard groups and the
// tensor-parallel splits resolved and before any unit has storage;
// collective over the world (every rank resolves the same mesh).
#pragma once

#include <cstdint>

#include "host/runtime/host_context.h"

namespace accel::runtime {

// Applies the mesh's expert size to context.model and refreshes the model
// view's shapes. Throws std::runtime_error with one line when the model
// cannot split so (no experts, a count the size does not divide). A no-op
// at expert size 1. Beside tensor parallelism each tensor index has its own
// expert groups (the layout's), whose ranks hold equal tokens.
void resolve_expert_parallel_plan(HostContext& context);

// Bytes this rank's token exchanges sent to other ranks since the last
// call (the rows it routed away, forward and backward; what a rank keeps
// for its own experts moves nothing).
int64_t take_expert_parallel_bytes(HostContext& context);

}  // namespace accel::runtime
