// model_layout.h — the model as the sharding plugins plan with it: units in order, each with
// its flat size, the parameters stored in its flat buffer, and the units it is
// tied to (the head's output layer reads the embedding's storage).
//
// Plain values copied out of the host's model services, so planning and shard
// math are pure functions of them (and unit-testable). Invariant: `params`
// holds only parameters stored in the unit's own flat buffer (flat_offset >=
// 0), in flat order, covering [0, numel) without gap; tied references appear
// only as `tied_units`. Thread-safety: plain values.
#pragma once

#include <accel/sdk/flat_slices.hpp>
#include <accel/sdk/services.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace accel::sharding {

struct ParamLayout {
  std::string name;  // the checkpoint name ("h.0.attn.c_attn.weight")
  int32_t index = 0;  // in the unit (model->get_param), tied references counted
  AccelParamRole role = ACCEL_PARAM_OTHER;
  int64_t flat_offset = 0;  // in the unit's flat buffer
  int64_t numel = 0;        // of the local slice
  std::vector<int64_t> global_shape;  // row-major
  std::vector<int64_t> local_shape;   // row-major; = global unless a tensor-parallel plan split it
  sdk::SplitSlice split;              // where the local slice lies in the global tensor (dim -1: whole)

  bool is_split() const { return split.dim >= 0; }
};

struct UnitLayout {
  int32_t index = 0;
  std::string name;  // "embedding", "block.3", "head"
  AccelUnitKind kind = ACCEL_UNIT_OTHER;
  int64_t numel = 0;                // elements of the flat buffers
  int32_t num_params = 0;           // the unit's parameters, tied references included
  std::vector<int32_t> tied_units;  // units whose storage this unit reads
  std::vector<ParamLayout> params;
  // Pipeline stages (ABI 1.7): whether this rank holds the unit (its stage's
  // units, or a tied copy), and whether it is a tied copy (another stage's
  // unit held for a local unit's reads: stepped here as there, its
  // gradients summed with the owner's, counted and saved by the owner).
  bool held = true;
  bool tied_copy = false;
};

// Whether the strategy reading the layout steps tensor-parallel slices
// (megatron's optimizer) or shards whole parameters only (fsdp, ZeRO).
enum class SplitParams { refuse, accept };

// Reads every unit through services.table()->model. Throws Error when the
// flat layout has a gap, or a parameter is split (local shape != global:
// another plugin split it) and `splits` is refuse. Call it after plans
// resolved (setup) when splits are accepted: before, every shape is global.
std::vector<UnitLayout> read_model_layout(const sdk::Services& services, SplitParams splits = SplitParams::refuse);

// The units this rank holds (UnitLayout::held), in order.
std::vector<UnitLayout> held_units(const std::vector<UnitLayout>& units);

}  // namespace accel::sharding
