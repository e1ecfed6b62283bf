// fp8_gather_codec.cpp — E4M3 weights on the all-gather (see
// fp8_gather_codec.h).
#include "fp8_gather_codec.h"

#include <accel/sdk/error.hpp>

#include <map>
#include <string>

namespace accel::fp8 {

WeightGatherCodec::WeightGatherCodec(const sdk::Kernels& ops, const Fp8Config& config, ScalingState& state,
                                     AccelGroup* tensor_group)
    : ops_(ops),
      config_(config),
      state_(state),
      tensor_group_(tensor_group),
      delivered_(static_cast<size_t>(state.num_linears()), 0),
      counts_(static_cast<size_t>(state.num_linears())) {
  const int64_t n = state.num_linears();
  if (config_.recipe == Recipe::current && n > 0) {
    scales_ = ops_.allocate(ACCEL_MEMORY_OTHER, kFloat32, {n}, ACCEL_MEMORY_DEVICE, false, "fp8 gather codec scales");
    scale_invs_ =
        ops_.allocate(ACCEL_MEMORY_OTHER, kFloat32, {n}, ACCEL_MEMORY_DEVICE, false, "fp8 gather codec scale_inv");
    ops_.fill(&scales_.tensor(), 1.0);
    ops_.fill(&scale_invs_.tensor(), 1.0);
    for (int64_t i = 0; i < n; ++i) {
      scale_cells_.push_back(std::make_unique<sdk::FlatView>(scales_.tensor(), i, 1));
      scale_inv_cells_.push_back(std::make_unique<sdk::FlatView>(scale_invs_.tensor(), i, 1));
    }
  }
}

const DLTensor* WeightGatherCodec::scale(int32_t slot) const {
  if (config_.recipe == Recipe::current) return scale_cells_.at(static_cast<size_t>(slot))->get();
  return state_.scale(TensorClass::weight, slot);
}

const DLTensor* WeightGatherCodec::scale_inv(int32_t slot) const {
  if (config_.recipe == Recipe::current) return scale_inv_cells_.at(static_cast<size_t>(slot))->get();
  return state_.scale_inv(TensorClass::weight, slot);
}

void WeightGatherCodec::query(AccelGatherCodecQueryArgs& args) {
  std::vector<int32_t>& encoded = unit_slots_[args.unit];
  encoded.clear();
  for (int32_t p = 0; p < args.num_params; ++p) {
    const int32_t slot = state_.slot(args.unit, p);
    if (slot < 0) continue;
    // Stacked experts are cast expert by expert: under current scaling each
    // with its own matrix's amax, which one code scale for the whole
    // gathered tensor would not reproduce; they gather in their dtype.
    const bool yes = !state_.linears()[static_cast<size_t>(slot)].experts &&
                     config_.gathers_weights_encoded(args.flags, args.param_dtype);
    delivered_[static_cast<size_t>(slot)] = yes ? 1 : 0;
    if (!yes) continue;
    args.code_dtypes[p] = config_.forward_dtype();
    encoded.push_back(slot);
  }
}

void WeightGatherCodec::current_scales(const AccelGatherCodecArgs& args) {
  // One amax per encoded weight of the unit, in the order every rank's
  // query gave (the same on every rank), so one MAX all_reduce agrees on
  // all of them; a rank without a slice of a weight contributes 0.
  const std::vector<int32_t>& slots = unit_slots_.at(args.unit);
  const auto m = static_cast<int64_t>(slots.size());
  if (m == 0) return;
  sdk::Buffer amax = ops_.allocate(ACCEL_MEMORY_WORKSPACE, kFloat32, {1, m}, ACCEL_MEMORY_DEVICE, true,
                                   "fp8 gather codec amax");
  sdk::Buffer scale = ops_.allocate(ACCEL_MEMORY_WORKSPACE, kFloat32, {m}, ACCEL_MEMORY_DEVICE, false,
                                    "fp8 gather codec scale");
  sdk::Buffer scale_inv = ops_.allocate(ACCEL_MEMORY_WORKSPACE, kFloat32, {m}, ACCEL_MEMORY_DEVICE, false,
                                        "fp8 gather codec scale_inv");
  const auto column_of = [&](int32_t slot) {
    for (int64_t k = 0; k < m; ++k) {
      if (slots[static_cast<size_t>(k)] == slot) return k;
    }
    throw sdk::Error(ACCEL_ERROR_INVALID_ARGUMENT, "fp8 gather codec: encode of a parameter query did not encode");
  };
  for (int32_t i = 0; i < args.num_slices; ++i) {
    const int32_t slot = state_.slot(args.unit, args.params[i]);
    const sdk::FlatView cell(amax.tensor(), column_of(slot), 1);
    // A cast whose output is overwritten below: only its amax is wanted.
    ops_.cast(args.values[i], args.codes[i], nullptr, cell.get(), /*accumulate_amax=*/true);
  }
  const sdk::FlatView flat(amax.tensor(), 0, m);
  if (args.group != nullptr && ops_.shape(args.group).size > 1) {
    ops_.all_reduce(args.group, flat.get(), ACCEL_REDUCE_MAX, "fp8 gather codec amax");
  }
  if (tensor_group_ != nullptr) ops_.all_reduce(tensor_group_, flat.get(), ACCEL_REDUCE_MAX, "fp8 gather codec amax (tensor)");
  // As the linear's current scaling does per cast: a zero amax keeps 1.
  ops_.fill(&scale.tensor(), 1.0);
  ops_.fp8_scale_update(&amax.tensor(), &scale.tensor(), &scale_inv.tensor(), state_.dtype(TensorClass::weight),
                        config_.margin, ACCEL_AMAX_MOST_RECENT, /*roll=*/false);
  for (int64_t k = 0; k < m; ++k) {
    const int32_t slot = slots[static_cast<size_t>(k)];
    const sdk::FlatView one_scale(scale.tensor(), k, 1), one_inv(scale_inv.tensor(), k, 1), one_amax(amax.tensor(), k, 1);
    ops_.copy(one_scale.get(), scale_cells_.at(static_cast<size_t>(slot))->get());
    ops_.copy(one_inv.get(), scale_inv_cells_.at(static_cast<size_t>(slot))->get());
    if (!eval_) {  // row 0 keeps the step's largest amax (metrics), as the linear records it
      sdk::Buffer sink =
          ops_.allocate(ACCEL_MEMORY_WORKSPACE, kFloat32, {1}, ACCEL_MEMORY_DEVICE, false, "fp8 amax record");
      ops_.cast(one_amax.get(), &sink.tensor(), nullptr, state_.amax(TensorClass::weight, slot), true);
    }
  }
}

void WeightGatherCodec::encode(const AccelGatherCodecArgs& args) {
  if (unit_slots_.count(args.unit) == 0) {
    throw sdk::Error(ACCEL_ERROR_FAILED_PRECONDITION, "fp8 gather codec: encode before query of unit " +
                                                          std::to_string(args.unit));
  }
  if (config_.recipe == Recipe::current) current_scales(args);
  const int32_t group_size = args.group != nullptr ? ops_.shape(args.group).size : 1;
  std::map<int32_t, CastCounts> counted;
  for (int32_t i = 0; i < args.num_slices; ++i) {
    const int32_t slot = state_.slot(args.unit, args.params[i]);
    if (!delivered(slot)) {
      throw sdk::Error(ACCEL_ERROR_INVALID_ARGUMENT, "fp8 gather codec: parameter " + std::to_string(args.params[i]) +
                                                         " of unit " + std::to_string(args.unit) +
                                                         " was not encoded by the last query");
    }
    // Delayed scaling records the slice's amax (the step-end MAX over WORLD
    // makes it the whole weight's); current scaling recorded the reduced one.
    const DLTensor* amax_cell =
        config_.recipe == Recipe::delayed && !eval_ ? state_.amax(TensorClass::weight, slot) : nullptr;
    ops_.cast(args.values[i], args.codes[i], scale(slot), amax_cell, /*accumulate_amax=*/true);
    if (config_.count_saturation) {
      const std::vector<float> s = ops_.read_floats(*scale(slot));
      const CastCounts add = count_cast(ops_.read_bytes(*args.values[i]), args.values[i]->dtype,
                                        ops_.read_bytes(*args.codes[i]), args.codes[i]->dtype, s.at(0));
      CastCounts& c = counted[slot];
      c.saturated += add.saturated;
      c.underflow += add.underflow;
      c.elements += add.elements;
    }
  }
  // The counts the linear adds per cast: this shard's times the group size,
  // so the data-parallel sum divided by the replicas is the whole weight's.
  for (int32_t slot : unit_slots_.at(args.unit)) {
    const CastCounts c = counted[slot];
    counts_[static_cast<size_t>(slot)] = CastCounts{c.saturated * group_size, c.underflow * group_size, c.elements};
  }
}

void WeightGatherCodec::decode(const AccelGatherCodecArgs& args) {
  for (int32_t i = 0; i < args.num_slices; ++i) {
    const int32_t slot = state_.slot(args.unit, args.params[i]);
    if (!delivered(slot)) {
      throw sdk::Error(ACCEL_ERROR_INVALID_ARGUMENT, "fp8 gather codec: parameter " + std::to_string(args.params[i]) +
                                                         " of unit " + std::to_string(args.unit) +
                                                         " was not encoded by the last query");
    }
    ops_.cast(args.codes[i], args.values[i], scale_inv(slot), nullptr, false);
  }
}

const DLTensor* WeightGatherCodec::recast(int32_t slot, const DLTensor& weight, const DLTensor& fp8,
                                          const DLTensor* transposed, CastCounts& counts) const {
  ops_.cast_transposed(&weight, &fp8, transposed, scale(slot), nullptr, false);
  if (config_.count_saturation) {
    const CastCounts& c = counts_[static_cast<size_t>(slot)];
    counts.saturated += c.saturated;
    counts.underflow += c.underflow;
    counts.elements += c.elements;
  }
  return scale_inv(slot);
}

}  // namespace accel::fp8
