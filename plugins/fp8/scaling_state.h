// scaling_state.h — the per-tensor FP8 scaling state of every block linear:
// amax histories, scales and inverse scales, and the delayed-scaling update
// at step end.
//
// Layout (what the checkpoint stores and the state log prints): the model's
// block linears are numbered 0..n-1 in (unit, param) order over the WHOLE
// model, not only this rank's stage, so every rank holds the same tensors.
// The forward group has history fp32 [amax_history_len, 2n] (columns 0..n-1
// the inputs, n..2n-1 the weights), scale and scale_inv fp32 [2n]; the
// backward group history [amax_history_len, n] (output gradients), scale and
// scale_inv [n]. Row 0 of a history is the step in progress: casts
// accumulate max |x| into it. At step end row 0 is all-reduced with MAX over
// WORLD (TransformerEngine's amax reduction: every data-, tensor- and
// pipeline-parallel rank then holds the same row and derives the same
// scales, so N ranks train as one; the gradients' row is first divided by
// the data-parallel size, see fp8_linear.cpp), then kernels->fp8_scale_update computes
// scale = fp8_max / amax / 2^margin (a zero or non-finite amax keeps the old
// scale) and shifts the rows down, every `interval` steps; between updates
// the rows still shift and the scales stay.
//
// Invariant: scales start at 1, histories at 0; scale_inv = 1 / scale.
// Thread-safety: loop thread only.
#pragma once

#include <accel/sdk/tensor.hpp>
#include <accel/sdk/kernels.hpp>

#include <array>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fp8_config.h"

namespace accel::fp8 {

inline constexpr DLDataType kFloat32{kDLFloat, 32, 1};

enum class TensorClass { input = 0, weight = 1, grad = 2 };
inline constexpr int kNumClasses = 3;
const char* to_string(TensorClass c);

// One block linear: its weight's unit and index in the unit.
struct LinearSlot {
  int32_t unit = 0;
  int32_t param = 0;
  std::string name;
  // A mixture of experts' stacked projections (ACCEL_PARAM_EXPERTS): the
  // chain runs each expert's matrix as this parameter, so one scale covers
  // every expert (per tensor, as the stacked tensor is one parameter).
  bool experts = false;
};

// Every linear of the model's block units (linear weights and stacked
// experts), in (unit, param) order.
std::vector<LinearSlot> find_block_linears(const sdk::Services& services);

// One history group (forward or backward) and its scales.
struct ScaleGroup {
  sdk::Buffer history;    // fp32 [len, columns]
  sdk::Buffer scale;      // fp32 [columns]
  sdk::Buffer scale_inv;  // fp32 [columns]
  sdk::Buffer spare;      // fp32 [columns]: the scale an interval-off roll updates
  DLDataType fp8_dtype{};
  int64_t columns = 0;
};

// What a step's amaxes and scales were, per tensor class (metrics).
struct ClassSummary {
  double amax = 0.0;       // max over the linears of this step's amax
  double min_scale = 0.0;  // min over the linears of the scale this step used
};

class ScalingState {
 public:
  ScalingState(const sdk::Kernels& ops, const Fp8Config& config, std::vector<LinearSlot> linears);

  int32_t num_linears() const { return static_cast<int32_t>(linears_.size()); }
  const std::vector<LinearSlot>& linears() const { return linears_; }
  // The slot of a linear, or -1 when it is not a block linear.
  int32_t slot(int32_t unit, int32_t param) const;

  DLDataType dtype(TensorClass c) const { return group(c).fp8_dtype; }
  // One-element views of the slot's scale, inverse scale and amax (row 0).
  const DLTensor* scale(TensorClass c, int32_t slot) const { return cell(c, slot, kScale); }
  const DLTensor* scale_inv(TensorClass c, int32_t slot) const { return cell(c, slot, kScaleInv); }
  const DLTensor* amax(TensorClass c, int32_t slot) const { return cell(c, slot, kAmax); }

  // After the step's backward (gradients_finalize): row 0 reduced over
  // `world` (delayed scaling; null for current scaling, whose casts reduced
  // their own), the gradients' row divided by `grad_divisor` (the
  // data-parallel size N: it holds N times the whole batch's amax,
  // fp8_linear.cpp), and copied for the host with the scales this step
  // used, into pinned memory; step_end's end_step reads them with no
  // synchronisation of its own (the host's read of the step's values comes
  // between, accel/plugin.h). The copies say so (ACCEL_COPY_DEFERRED_READ,
  // ABI 1.15): on CUDA they are queued, not waited for; a 1.14 host makes
  // them synchronously, and before 1.14 step_end synchronises. Current
  // scaling clears row 0 after the copy (stream-ordered behind it).
  void finish_rows(AccelGroup* world, int32_t grad_divisor);
  bool rows_finished() const { return rows_finished_; }
  // Step end of a training step, after finish_rows: the rows summarised for
  // the metrics; delayed scaling then updates the scales (every interval) and
  // rolls the history. `step` is 0-based. No read of the device.
  std::array<ClassSummary, kNumClasses> end_step(int64_t step);
  // Current scaling: only row 0 is kept (metrics; cleared by finish_rows).
  std::array<ClassSummary, kNumClasses> end_step_current();

  ScaleGroup& forward() { return forward_; }
  ScaleGroup& backward() { return backward_; }
  const ScaleGroup& forward() const { return forward_; }
  const ScaleGroup& backward() const { return backward_; }
  // Recomputes scale_inv from scale (after loading scales).
  void refresh_inverse();
  // One JSON line of the whole state after end_step (the test-only state
  // log): the step's reduced amax rows, then every scale and history.
  std::string to_json_line(int64_t step) const;

 private:
  enum Field { kScale = 0, kScaleInv = 1, kAmax = 2 };
  const ScaleGroup& group(TensorClass c) const { return c == TensorClass::grad ? backward_ : forward_; }
  int64_t column(TensorClass c, int32_t slot) const;
  const DLTensor* cell(TensorClass c, int32_t slot, Field f) const;
  // The rows and scales finish_rows copied, per class.
  std::array<ClassSummary, kNumClasses> summarise() const;
  // At step end: the copied rows kept for the state log, and summarised.
  std::array<ClassSummary, kNumClasses> take_rows();
  ScaleGroup make_group(int64_t columns, DLDataType dtype, const char* label) const;

  const sdk::Kernels& ops_;
  const Fp8Config& config_;
  std::vector<LinearSlot> linears_;
  ScaleGroup forward_;
  ScaleGroup backward_;
  // cells_[class][field][slot]: views into the buffers above.
  std::vector<std::unique_ptr<sdk::FlatView>> cells_[kNumClasses][3];
  std::vector<float> last_rows_[2];  // row 0 of each group as end_step reduced it
  // Per group, pinned host fp32 [2, columns]: row 0 as finish_rows reduced
  // it, then the scales the step used.
  sdk::Buffer readback_[2];
  bool rows_finished_ = false;
};

}  // namespace accel::fp8
