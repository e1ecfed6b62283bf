// fp8_gather_codec.h — the fp8 plugin's parameter gather codec (ABI 1.8,
// accel/gather_codec.h): a sharding plugin that offers it all-gathers each
// block linear's weight as E4M3 codes, cast with the scale the linear casts
// that weight with this step, instead of in its parameter dtype.
//
// Why the numerics do not change (tests/python/test_fp8.py, GatherCodec):
// the cast is elementwise, so casting each rank's shard gives the codes of
// the whole weight; decoding (code x scale_inv, rounded to the parameter
// dtype) and re-casting with the same scale gives those codes back, bit for
// bit, saturated codes and negative zero included (the decoded value lies
// within 2^-9 of the code's value, an FP8 step is at least 2^-4 of it),
// as long as the decoded values are normal in the parameter dtype. The
// scale is the one the linear would use: delayed scaling's is fixed for
// the step (every rank holds the same); current scaling's comes from the
// whole weight's amax, which encode reduces with MAX over the sharding group
// (one all_reduce of a vector per unit) and the TENSOR group when split.
// The amax the history records is the true weight's: encode records each
// shard's (the step-end MAX over WORLD makes it the whole weight's), and the
// linear, told the weight came through the codec, re-casts it with that
// scale and records nothing; saturation counts, taken at encode (x the
// group size, so the data-parallel sum per replica is the whole weight's),
// are added by the linear each time it casts, as it would have counted.
//
// Stacked experts (a mixture of experts' projections) are never encoded: the
// linear casts them expert by expert. A weight is gathered encoded only when every use of the gathered weight
// is its FP8 cast: not with override_linear_precision's fprop or dgrad
// (those GEMMs read the unquantised weight), not in an evaluation forward
// that runs in the run's precision (NO_GRAD without
// use_autocast_during_eval), and only into a float parameter dtype.
//
// Thread-safety: loop thread only.
#pragma once

#include <accel/sdk/sdk.hpp>
#include <accel/sdk/kernels.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "cast_counter.h"
#include "fp8_config.h"
#include "scaling_state.h"

namespace accel::fp8 {

class WeightGatherCodec {
 public:
  // `tensor_group`: the tensor-parallel group when it has several ranks
  // (current scaling reduces the weight's amax over it too), else NULL.
  WeightGatherCodec(const sdk::Kernels& ops, const Fp8Config& config, ScalingState& state,
                    AccelGroup* tensor_group);

  void query(AccelGatherCodecQueryArgs& args);
  void encode(const AccelGatherCodecArgs& args);
  void decode(const AccelGatherCodecArgs& args);

  // Evaluation steps record no amax.
  void set_eval(bool eval) { eval_ = eval; }

  // Whether the weight of `slot` the linear now sees was decoded by this
  // codec (its unit's last query encoded it).
  bool delivered(int32_t slot) const { return slot >= 0 && delivered_.at(static_cast<size_t>(slot)) != 0; }
  // The linear's cast of a delivered weight: into `fp8` with the scale it
  // was encoded with, recording no amax; returns the inverse scale. Adds the
  // encode's saturation counts to `counts`. `transposed` (NULL, or [in,
  // out]) receives the codes transposed too.
  const DLTensor* recast(int32_t slot, const DLTensor& weight, const DLTensor& fp8, const DLTensor* transposed,
                         CastCounts& counts) const;

 private:
  const DLTensor* scale(int32_t slot) const;
  const DLTensor* scale_inv(int32_t slot) const;
  // Current scaling: the whole weights' amax of the unit's encoded slots
  // (reduced), their scales written into the codec's own cells.
  void current_scales(const AccelGatherCodecArgs& args);

  const sdk::Kernels& ops_;
  const Fp8Config& config_;
  ScalingState& state_;
  AccelGroup* tensor_group_;
  bool eval_ = false;
  std::vector<uint8_t> delivered_;       // per slot
  std::vector<CastCounts> counts_;       // per slot: the last encode's, x group size
  std::map<int32_t, std::vector<int32_t>> unit_slots_;  // per unit: its encoded slots, in param order (last query)
  // Current scaling: per slot, the scale and inverse scale the last encode
  // derived (fp32 [n] each), and per-call scratch.
  sdk::Buffer scales_, scale_invs_;
  std::vector<std::unique_ptr<sdk::FlatView>> scale_cells_, scale_inv_cells_;
};

}  // namespace accel::fp8
