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
// temporary is one chunk, not the buffer.
inline constexpr int64_t kAdamWChunkNumel = int64_t{1} << 20;  // 4 MiB of fp32
void adamw_step_flat(at::Tensor& param, const at::Tensor& grad, at::Tensor& exp_avg,
                     at::Tensor& exp_avg_sq, int64_t decay_numel, int64_t step, const AdamWHyper& h,
                     int64_t chunk_numel = kAdamWChunkNumel);

}  // namespace accel::model
