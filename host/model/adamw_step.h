// One AdamW step on flat fp32 tensors, with torch.optim.AdamW's exact
// semantics (decoupled weight decay, bias correction, eps added after the
// bias-corrected square root). The one implementation of the update: the
// trainer's FlatAdamW (host/train/flat_adamw.h) and the kernel service a
// plugin's sharded optimizer calls (host/runtime/kernel_services.cpp) both
// run it, so a plugin's step is bit-identical to the host's.
//
// Thread-safety: pure function of its arguments; callers own the tensors.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace accel::model {

struct AdamWHyper {
  double lr, beta1, beta2, eps, weight_decay;
};

// Weight decay applies to the prefix [0, decay_numel) of the flat buffer
// (Unit's layout puts decayed parameters first). The same function steps a
// shard: pass the shard's buffers and the part of the decay range it holds.
// `step` counts from 1. The buffers are stepped `chunk_numel` elements at a
// time (bit-identical to one pass: every op is elementwise), so the step's
// temporary is one chunk, not the buffer. On a CUDA device the step is
// adamw_step_fused_flat instead: one fused kernel per region, no temporary.
inline constexpr int64_t kAdamWChunkNumel = int64_t{1} << 20;  // 4 MiB of fp32
void adamw_step_flat(at::Tensor& param, const at::Tensor& grad, at::Tensor& exp_avg,
                     at::Tensor& exp_avg_sq, int64_t decay_numel, int64_t step, const AdamWHyper& h,
                     int64_t chunk_numel = kAdamWChunkNumel);

// The same step through ATen's fused AdamW (torch.optim.AdamW(fused=True)):
// each region (decayed, not decayed) in one multi-tensor kernel that reads
// every buffer once and writes the three it updates, in fp32 registers. It
// rounds differently from the single-tensor ops (same formula, another
// order: within 1e-6 relative of them, tests/host/optimizer_test.cpp), so
// CPU ranks keep adamw_step_flat, whose bits torch.optim.AdamW's default
// path gives. Runs on CPU tensors too, where it is tested. `found_inf`
// (an fp32 scalar on the buffers' device, or undefined): non-zero makes the
// kernel change nothing, a skip decided on the device without the host
// reading it (torch's GradScaler hands the fused kernel the same).
void adamw_step_fused_flat(at::Tensor& param, const at::Tensor& grad, at::Tensor& exp_avg, at::Tensor& exp_avg_sq,
                           int64_t decay_numel, int64_t step, const AdamWHyper& h,
                           const at::Tensor& found_inf = at::Tensor());

// Its two halves: the moments' update (exp_avg.lerp_(grad, 1 - beta1),
// exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2)), then weight decay
// and the parameter's update from the updated moments. adamw_step_flat is
// the one after the other, bit for bit.
void adamw_moments_flat(const at::Tensor& grad, at::Tensor& exp_avg, at::Tensor& exp_avg_sq, const AdamWHyper& h);
void adamw_param_flat(at::Tensor& param, const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq,
                      int64_t decay_numel, int64_t step, const AdamWHyper& h);

// ---------------------------------------------------------------------------
// Scaled low-precision moments (MS-AMP O2, accel/precision.h): a moment is
// stored as fmt(m * scale), fmt E4M3FN (exp_avg) or f16 (exp_avg_sq), with
// one power-of-two scale per tensor, so dequantising (stored / scale) is
// exact and the fp32 values a checkpoint keeps re-quantise to themselves.

// fmt's largest finite value: 448 (E4M3FN), 65504 (f16); fp32's otherwise.
double moment_format_max(at::ScalarType format);
// MS-AMP's scale: 2^floor(log2(fmt_max / amax)); 1 when amax is 0 or not
// finite.
float moment_scale(float amax, at::ScalarType format);
// stored / scale in fp32.
at::Tensor dequantize_moment(const at::Tensor& stored, float scale);
// stored = fmt(values * scale) (saturating; the scale keeps it in range).
void quantize_moment(const at::Tensor& values, float scale, at::Tensor& stored);

// One AdamW step of a whole tensor with scaled moments: dequantise, step as
// adamw_step_flat (the parameter from the unquantised new moments), choose
// each moment's new scale from its amax, store. The kernel service's
// two-pass adamw_step_scaled computes the same bits with agreed scales.
void adamw_step_scaled_flat(at::Tensor& param, const at::Tensor& grad, at::Tensor& exp_avg, float& exp_avg_scale,
                            at::Tensor& exp_avg_sq, float& exp_avg_sq_scale, int64_t decay_numel, int64_t step,
                            const AdamWHyper& h);

}  // namespace accel::model
