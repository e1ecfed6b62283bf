// checkpoint_io.h — fp8's state in checkpoints: the amax histories and the
// scales of both groups (scaling_state.h), plus the recipe as text.
//
// Names (plugin space, the host prefixes "fp8/"): forward_amax_history
// [len, 2n], forward_scale [2n], backward_amax_history [len, n],
// backward_scale [n]. After the step-end all-reduce every rank holds the
// same values, so rank 0 puts them whole. On load a checkpoint without them
// (written by a run without fp8) is not an error: the state starts fresh
// (scales 1, empty histories), as a new run's does; one whose shapes differ
// (another amax_history_len or model) is refused with one line naming both.
// scale_inv is derived, not stored. Thread-safety: loop thread only.
#pragma once

#include <accel/accel.h>
#include <accel/sdk/kernels.hpp>

#include "fp8_config.h"
#include "scaling_state.h"

namespace accel::fp8 {

void save_state(const sdk::Kernels& ops, const Fp8Config& config, const ScalingState& state, int32_t rank);
// Returns false when the checkpoint holds no fp8 state (fresh start).
bool load_state(const sdk::Kernels& ops, const Fp8Config& config, ScalingState& state);

}  // namespace accel::fp8
