// fp8_linear.h — the fp8 link of the linear chain: y = x W^T + b with FP8
// operands, and its dgrad / wgrad on FP8 output gradients.
//
// Forward casts x and W to E4M3 with their own scales (amax accumulated into
// the state's row 0), runs kernels->gemm on the FP8 operands with the
// inverse scales (fp32 accumulation, bias added in fp32), and keeps the FP8
// copies and the inverse scales they were cast with for backward. Backward
// casts grad_output to E5M2 (HYBRID) or E4M3, dgrad = g8 W8, wgrad =
// g8^T x8 accumulated into grad_weight, grad_bias += column sums of g. A GEMM
// named in override_linear_precision runs on the unquantised operands
// (fprop through the next link, dgrad/wgrad through kernels->gemm in fp32);
// a linear with every GEMM overridden, one that is not a block linear, and
// an evaluation forward without use_autocast_during_eval pass straight to
// the next link. Current scaling computes each cast's scale from its own
// amax (all-reduced with MAX over the data-parallel group, so N ranks
// quantise as one) just before the cast.
//
// Thread-safety: loop thread only (the chain runs there).
#pragma once

#include <accel/sdk/sdk.hpp>
#include <accel/sdk/kernels.hpp>

#include <array>
#include <cstdint>

#include "cast_counter.h"
#include "fp8_config.h"
#include "fp8_gather_codec.h"
#include "scaling_state.h"

namespace accel::fp8 {

class Fp8Linear {
 public:
  // `data_group`: the data-parallel group when it has several ranks (current
  // scaling reduces each amax over it), else NULL. `grad_divisor`: its size
  // (see "Gradients as the whole batch's" in the .cpp). `tensor_group`: the
  // tensor-parallel group when it has several ranks, else NULL: current
  // scaling reduces each amax over it too, since a tensor-parallel rank
  // holds a slice of a weight (and, with sequence parallelism, of an input)
  // whose per-tensor scale is the whole tensor's.
  Fp8Linear(const sdk::Kernels& ops, const Fp8Config& config, ScalingState& state, DLDataType compute_dtype,
            AccelGroup* data_group, int32_t grad_divisor, AccelGroup* tensor_group = nullptr);

  void forward(AccelLinearForwardArgs& args, const AccelLinearNext& next);
  void backward(AccelLinearBackwardArgs& args, const AccelLinearNext& next);

  // Evaluation steps (ACCEL_STEP_EVAL) between step_begin and step_end.
  void set_eval(bool eval) { eval_ = eval; }
  // The gather codec, when the plugin offers it: a weight it delivered is
  // re-cast with the scale it was encoded with, recording no amax.
  void set_codec(const WeightGatherCodec* codec) { codec_ = codec; }
  // The counts since the last call, per TensorClass.
  std::array<CastCounts, kNumClasses> take_counts();

 private:
  struct Saved;
  // Casts `source` into `fp8` for (cls, slot) and returns the inverse scale
  // it was cast with (a state cell for delayed scaling, a scratch scalar for
  // current scaling, valid until the next cast of that class). `transposed`
  // (NULL, or `fp8`'s transpose) receives the codes transposed in the same
  // pass.
  const DLTensor* quantize(TensorClass cls, int32_t slot, const DLTensor& source, const DLTensor& fp8,
                           const DLTensor* transposed);
  void count(TensorClass cls, const DLTensor& source, const DLTensor& fp8, const DLTensor& scale);
  // grad_bias [out] += column sums of g [tokens, out], fp32 accumulation.
  void add_bias_grad(const DLTensor& g, const DLTensor& grad_bias);
  DLDataType output_dtype(const DLTensor& input) const;
  bool all_overridden() const { return config_.override_fprop && config_.override_dgrad && config_.override_wgrad; }

  const sdk::Kernels& ops_;
  const Fp8Config& config_;
  ScalingState& state_;
  DLDataType compute_dtype_;
  AccelGroup* data_group_;
  int32_t grad_divisor_;
  AccelGroup* tensor_group_;
  bool eval_ = false;
  const WeightGatherCodec* codec_ = nullptr;
  // Delayed scaling under data parallelism: the gradient scale / N and
  // inverse scale x N this cast uses.
  sdk::Buffer grad_scale_, grad_scale_inv_;
  // Current scaling scratch, per class: amax [1, 1], scale [1], scale_inv [1].
  std::array<sdk::Buffer, kNumClasses> current_amax_, current_scale_, current_scale_inv_;
  sdk::Buffer ones_;  // [tokens] of 1 in the gradient's dtype: the bias gradient's GEMM operand
  std::array<CastCounts, kNumClasses> counts_{};
};

}  // namespace accel::fp8
