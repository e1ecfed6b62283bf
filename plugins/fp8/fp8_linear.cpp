// fp8_linear.cpp — the FP8 linear link (see fp8_linear.h).
#include "fp8_linear.h"

#include <accel/sdk/error.hpp>

#include <memory>
#include <utility>

namespace accel::fp8 {

namespace {

// A [rows, cols] row-major view of a contiguous tensor's first rows*cols
// elements (a bias as [1, out], the ones vector as [1, tokens]).
class Matrix {
 public:
  Matrix(const DLTensor& base, int64_t rows, int64_t cols) : shape_{rows, cols}, strides_{cols, 1} {
    view_ = base;
    view_.ndim = 2;
    view_.shape = shape_;
    view_.strides = strides_;
  }
  Matrix(const Matrix&) = delete;
  Matrix& operator=(const Matrix&) = delete;
  const DLTensor* get() const noexcept { return &view_; }

 private:
  int64_t shape_[2];
  int64_t strides_[2];
  DLTensor view_{};
};

int64_t rows_of(const DLTensor& t) { return t.ndim == 2 ? t.shape[0] : 0; }
int64_t cols_of(const DLTensor& t) { return t.ndim == 2 ? t.shape[1] : 0; }

void require_matrix(const DLTensor* t, const char* what) {
  if (t == nullptr || t->ndim != 2 || !accel_tensor_is_contiguous(t)) {
    throw sdk::Error(ACCEL_ERROR_INVALID_ARGUMENT,
                     std::string("fp8 linear: ") + what + " must be a contiguous 2-D tensor, got " +
                         (t ? sdk::describe(*t) : std::string("NULL")));
  }
}

bool is_float16(DLDataType t) { return t.bits == 16 && (t.code == kDLFloat || t.code == kDLBfloat); }

}  // namespace

// What forward keeps for backward: the FP8 operands, transposed, and the
// inverse scales they were cast with, so backward uses exactly the
// quantisation forward used. Transposed because FP8 tensor cores take the
// second operand of a GEMM column-major only (cuBLASLt on sm_89/sm_90):
// dgrad is g [tokens, out] x (W^T)^T and wgrad g^T [out, tokens] x (x^T)^T,
// each a row-major first operand and a [n, k] row-major second one, which
// the casts write in the same pass as the forward's codes.
struct Fp8Linear::Saved {
  sdk::Buffer input8t;   // [in, tokens], E4M3; empty when wgrad is overridden
  sdk::Buffer weight8t;  // [in, out], E4M3; empty when dgrad is overridden
  sdk::Buffer inverse;   // fp32 [8]: the input's at 0, the weight's at 4
};

namespace {
// cuBLASLt refuses a scale that is not 16-byte aligned, so the two inverse
// scales sit 16 bytes apart in their buffer (no copy per GEMM).
constexpr int64_t kInverseInput = 0;
constexpr int64_t kInverseWeight = 4;
constexpr int64_t kInverseCells = 8;
}  // namespace

Fp8Linear::Fp8Linear(const sdk::Kernels& ops, const Fp8Config& config, ScalingState& state, DLDataType compute_dtype,
                     AccelGroup* data_group, int32_t grad_divisor, AccelGroup* tensor_group)
    : ops_(ops),
      config_(config),
      state_(state),
      compute_dtype_(compute_dtype),
      data_group_(data_group),
      grad_divisor_(grad_divisor),
      tensor_group_(tensor_group) {
  if (grad_divisor_ > 1) {
    grad_scale_ = ops_.allocate(ACCEL_MEMORY_OTHER, kFloat32, {1}, ACCEL_MEMORY_DEVICE, false, "fp8 grad scale / N");
    grad_scale_inv_ =
        ops_.allocate(ACCEL_MEMORY_OTHER, kFloat32, {1}, ACCEL_MEMORY_DEVICE, false, "fp8 grad scale_inv x N");
  }
  if (config_.recipe == Recipe::current) {
    for (int c = 0; c < kNumClasses; ++c) {
      current_amax_[c] =
          ops_.allocate(ACCEL_MEMORY_OTHER, kFloat32, {1, 1}, ACCEL_MEMORY_DEVICE, false, "fp8 current amax");
      current_scale_[c] =
          ops_.allocate(ACCEL_MEMORY_OTHER, kFloat32, {1}, ACCEL_MEMORY_DEVICE, false, "fp8 current scale");
      current_scale_inv_[c] =
          ops_.allocate(ACCEL_MEMORY_OTHER, kFloat32, {1}, ACCEL_MEMORY_DEVICE, false, "fp8 current scale_inv");
    }
  }
}

DLDataType Fp8Linear::output_dtype(const DLTensor& input) const {
  // Under bf16 autocast the host's GEMM returns bf16; the FP8 GEMM returns
  // what it would.
  return is_float16(compute_dtype_) ? compute_dtype_ : input.dtype;
}

std::array<CastCounts, kNumClasses> Fp8Linear::take_counts() { return std::exchange(counts_, {}); }

const DLTensor* Fp8Linear::quantize(TensorClass cls, int32_t slot, const DLTensor& source, const DLTensor& fp8,
                                    const DLTensor* transposed) {
  // A weight gathered as FP8 codes and decoded: re-cast with the scale it
  // was encoded with, which gives the same codes; its amax was recorded
  // from the true weight at encode (fp8_gather_codec.h).
  if (cls == TensorClass::weight && codec_ != nullptr && codec_->delivered(slot)) {
    return codec_->recast(slot, source, fp8, transposed, counts_[static_cast<size_t>(cls)]);
  }
  // Evaluation casts record no amax: an evaluation between steps must not
  // change the scales training derives.
  const DLTensor* amax_cell = eval_ ? nullptr : state_.amax(cls, slot);
  if (config_.recipe == Recipe::delayed) {
    const DLTensor* scale = state_.scale(cls, slot);
    const DLTensor* scale_inv = state_.scale_inv(cls, slot);
    if (cls == TensorClass::grad && grad_divisor_ > 1) {
      // Gradients as the whole batch's: each data-parallel rank's loss is the
      // mean over its own share, so the output gradient it sees is N times
      // the whole batch's (the reduction averages later). Casting with
      // scale / N quantises N*g exactly as one process quantises g (for N a
      // power of two, bit for bit), and step end divides the recorded amax
      // by N, so the scales do not depend on the world size either.
      ops_.copy(scale, &grad_scale_.tensor());
      ops_.scale(&grad_scale_.tensor(), 1.0 / grad_divisor_);
      ops_.copy(scale_inv, &grad_scale_inv_.tensor());
      ops_.scale(&grad_scale_inv_.tensor(), grad_divisor_);
      scale = &grad_scale_.tensor();
      scale_inv = &grad_scale_inv_.tensor();
    }
    ops_.cast_transposed(&source, &fp8, transposed, scale, amax_cell, /*accumulate_amax=*/true);
    if (config_.count_saturation) count(cls, source, fp8, *scale);
    return scale_inv;
  }
  // Current scaling: read amax (a cast whose result is overwritten below),
  // agree on it across the data- and tensor-parallel groups (every rank of
  // both runs the same casts in the same order), derive the scale, cast.
  const auto c = static_cast<size_t>(cls);
  const DLTensor& amax = current_amax_[c].tensor();
  const sdk::FlatView amax_flat(amax, 0, 1);
  ops_.cast(&source, &fp8, nullptr, amax_flat.get(), /*accumulate_amax=*/false);
  if (data_group_ != nullptr) ops_.all_reduce(data_group_, amax_flat.get(), ACCEL_REDUCE_MAX, "fp8 current amax");
  if (tensor_group_ != nullptr) {
    ops_.all_reduce(tensor_group_, amax_flat.get(), ACCEL_REDUCE_MAX, "fp8 current amax (tensor)");
  }
  if (amax_cell != nullptr) {  // row 0 of the history keeps the step's largest amax (metrics)
    sdk::Buffer sink =
        ops_.allocate(ACCEL_MEMORY_WORKSPACE, kFloat32, {1}, ACCEL_MEMORY_DEVICE, false, "fp8 amax record");
    ops_.cast(amax_flat.get(), &sink.tensor(), nullptr, amax_cell, /*accumulate_amax=*/true);
  }
  ops_.fill(&current_scale_[c].tensor(), 1.0);  // a zero amax keeps 1
  ops_.fp8_scale_update(&amax, &current_scale_[c].tensor(), &current_scale_inv_[c].tensor(), state_.dtype(cls),
                        config_.margin, ACCEL_AMAX_MOST_RECENT, /*roll=*/false);
  ops_.cast_transposed(&source, &fp8, transposed, &current_scale_[c].tensor(), nullptr, false);
  if (config_.count_saturation) count(cls, source, fp8, current_scale_[c].tensor());
  return &current_scale_inv_[c].tensor();
}

void Fp8Linear::count(TensorClass cls, const DLTensor& source, const DLTensor& fp8, const DLTensor& scale) {
  const std::vector<float> s = ops_.read_floats(scale);
  const CastCounts add =
      count_cast(ops_.read_bytes(source), source.dtype, ops_.read_bytes(fp8), fp8.dtype, s.at(0));
  CastCounts& total = counts_[static_cast<size_t>(cls)];
  total.saturated += add.saturated;
  total.underflow += add.underflow;
  total.elements += add.elements;
}

void Fp8Linear::forward(AccelLinearForwardArgs& args, const AccelLinearNext& next) {
  const int32_t slot = state_.slot(args.unit, args.param);
  if (slot < 0 || all_overridden() || (eval_ && !config_.use_autocast_during_eval)) {
    sdk::forward_next(next, args);
    return;
  }
  require_matrix(args.input, "input");
  require_matrix(args.weight, "weight");
  const DLTensor& x = *args.input;
  const DLTensor& w = *args.weight;
  const bool keep = (args.flags & ACCEL_LINEAR_NO_GRAD) == 0;
  const DLDataType e4m3 = config_.forward_dtype();

  // The row-major codes feed this GEMM only; backward keeps the transposed
  // ones its GEMMs take (see Saved).
  auto saved = std::make_unique<Saved>();
  sdk::Buffer x8 = ops_.allocate(ACCEL_MEMORY_WORKSPACE, e4m3, {rows_of(x), cols_of(x)}, ACCEL_MEMORY_DEVICE, false,
                                 "fp8 input");
  sdk::Buffer w8 = ops_.allocate(ACCEL_MEMORY_WORKSPACE, e4m3, {rows_of(w), cols_of(w)}, ACCEL_MEMORY_DEVICE, false,
                                 "fp8 weight");
  if (keep && !config_.override_wgrad) {
    saved->input8t = ops_.allocate(ACCEL_MEMORY_ACTIVATIONS, e4m3, {cols_of(x), rows_of(x)}, ACCEL_MEMORY_DEVICE,
                                   false, "fp8 input, transposed");
  }
  if (keep && !config_.override_dgrad) {
    saved->weight8t = ops_.allocate(ACCEL_MEMORY_ACTIVATIONS, e4m3, {cols_of(w), rows_of(w)}, ACCEL_MEMORY_DEVICE,
                                    false, "fp8 weight, transposed");
  }
  saved->inverse = ops_.allocate(ACCEL_MEMORY_ACTIVATIONS, kFloat32, {kInverseCells}, ACCEL_MEMORY_DEVICE, false,
                                 "fp8 inverse scales");
  const sdk::FlatView inv_x(saved->inverse.tensor(), kInverseInput, 1);
  const sdk::FlatView inv_w(saved->inverse.tensor(), kInverseWeight, 1);
  ops_.copy(quantize(TensorClass::input, slot, x, x8.tensor(), saved->input8t ? &saved->input8t.tensor() : nullptr),
            inv_x.get());
  ops_.copy(quantize(TensorClass::weight, slot, w, w8.tensor(), saved->weight8t ? &saved->weight8t.tensor() : nullptr),
            inv_w.get());

  if (config_.override_fprop) {
    sdk::forward_next(next, args);  // the higher-precision GEMM; ours only recorded amax
  } else {
    sdk::Buffer out = ops_.allocate(ACCEL_MEMORY_ACTIVATIONS, output_dtype(x), {rows_of(x), rows_of(w)},
                                    ACCEL_MEMORY_DEVICE, false, "fp8 linear output");
    // Fast accumulation in the forward GEMM only, as TransformerEngine does
    // (its gradients keep cuBLASLt's fp32 promotion).
    ops_.gemm(&x8.tensor(), &w8.tensor(), &out.tensor(), args.bias, inv_x.get(), inv_w.get(),
              ACCEL_GEMM_TRANS_B | ACCEL_GEMM_FP8_FAST_ACCUMULATE);
    args.output = &out.tensor();
    args.output_buffer = out.release();  // ownership passes to the caller
  }
  if (!keep) return;  // nothing for backward: every buffer goes now
  *args.saved = saved.release();  // freed in backward
}

void Fp8Linear::backward(AccelLinearBackwardArgs& args, const AccelLinearNext& next) {
  std::unique_ptr<Saved> saved(static_cast<Saved*>(args.saved));
  args.saved = nullptr;
  const int32_t slot = state_.slot(args.unit, args.param);
  if (!saved || slot < 0) {  // forward passed this linear on
    sdk::backward_next(next, args);
    return;
  }
  require_matrix(args.grad_output, "grad_output");
  require_matrix(args.input, "input");
  require_matrix(args.weight, "weight");
  require_matrix(args.grad_weight, "grad_weight");
  const DLTensor& g = *args.grad_output;
  const DLTensor& x = *args.input;
  const DLTensor& w = *args.weight;
  const sdk::FlatView inv_x(saved->inverse.tensor(), kInverseInput, 1);
  const sdk::FlatView inv_w(saved->inverse.tensor(), kInverseWeight, 1);

  // g's codes row-major for dgrad, transposed for wgrad, from one cast.
  sdk::Buffer g8, g8t, inv_g;
  if (!config_.override_dgrad || !config_.override_wgrad) {
    const DLDataType e5m2 = config_.backward_dtype();
    g8 = ops_.allocate(ACCEL_MEMORY_WORKSPACE, e5m2, {rows_of(g), cols_of(g)}, ACCEL_MEMORY_DEVICE, false,
                       "fp8 grad_output");
    if (!config_.override_wgrad) {
      g8t = ops_.allocate(ACCEL_MEMORY_WORKSPACE, e5m2, {cols_of(g), rows_of(g)}, ACCEL_MEMORY_DEVICE, false,
                          "fp8 grad_output, transposed");
    }
    inv_g = ops_.allocate(ACCEL_MEMORY_WORKSPACE, kFloat32, {1}, ACCEL_MEMORY_DEVICE, false, "fp8 grad inverse scale");
    ops_.copy(quantize(TensorClass::grad, slot, g, g8.tensor(), g8t ? &g8t.tensor() : nullptr), &inv_g.tensor());
  }

  // dgrad: dx [tokens, in] = g [tokens, out] W [out, in].
  sdk::Buffer dx = ops_.allocate(ACCEL_MEMORY_ACTIVATIONS, x.dtype, {rows_of(x), cols_of(x)}, ACCEL_MEMORY_DEVICE,
                                 false, "fp8 grad_input");
  if (config_.override_dgrad) {
    ops_.gemm(&g, &w, &dx.tensor(), nullptr, nullptr, nullptr, 0);
  } else {
    ops_.gemm(&g8.tensor(), &saved->weight8t.tensor(), &dx.tensor(), nullptr, &inv_g.tensor(), inv_w.get(),
              ACCEL_GEMM_TRANS_B);
  }
  // wgrad: dW [out, in] += g^T [out, tokens] x [tokens, in].
  if (config_.override_wgrad) {
    ops_.gemm(&g, &x, args.grad_weight, nullptr, nullptr, nullptr, ACCEL_GEMM_TRANS_A | ACCEL_GEMM_ACCUMULATE);
  } else {
    ops_.gemm(&g8t.tensor(), &saved->input8t.tensor(), args.grad_weight, nullptr, &inv_g.tensor(), inv_x.get(),
              ACCEL_GEMM_TRANS_B | ACCEL_GEMM_ACCUMULATE);
  }
  if (args.grad_bias != nullptr) add_bias_grad(g, *args.grad_bias);
  args.grad_input = &dx.tensor();
  args.grad_input_buffer = dx.release();  // ownership passes to the caller
}

void Fp8Linear::add_bias_grad(const DLTensor& g, const DLTensor& grad_bias) {
  // The bias gradient stays in high precision (as in TransformerEngine):
  // ones [1, tokens] x g [tokens, out], accumulated into grad_bias [1, out]
  // in fp32. The ones take g's dtype (exact in any), so a CUDA host reads
  // a 16-bit g as it is instead of widening it first.
  const int64_t tokens = rows_of(g);
  if (!ones_ || accel_tensor_numel(&ones_.tensor()) < tokens || !accel_dtype_equal(ones_.tensor().dtype, g.dtype)) {
    ones_ = ops_.allocate(ACCEL_MEMORY_WORKSPACE, g.dtype, {tokens}, ACCEL_MEMORY_DEVICE, false, "fp8 bias ones");
    ops_.fill(&ones_.tensor(), 1.0);
  }
  const Matrix ones(ones_.tensor(), 1, tokens);
  const Matrix bias(grad_bias, 1, cols_of(g));
  ops_.gemm(ones.get(), &g, bias.get(), nullptr, nullptr, nullptr, ACCEL_GEMM_ACCUMULATE);
}

}  // namespace accel::fp8
