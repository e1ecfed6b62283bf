// scaled_moments.h — AdamW moments stored in the precision policy's scaled
// formats (accel/precision.h; fp8's MS-AMP O2): exp_avg as E4M3FN, exp_avg_sq
// as f16, each with one power-of-two scale per parameter, in the sharded and
// the host-owned units of the sharding machinery.
//
// A moment buffer holds a contiguous range of a unit's flat elements (a
// shard's real part, or a whole host-owned unit); its pieces are the
// parameters' parts in that range. The optimizer steps them in two passes
// (kernels->adamw_step_scaled) around one MAX all_reduce of every
// parameter's new amaxes over SHARDING, so the ranks that hold parts of a
// parameter choose its scales as one process would. Checkpoints keep fp32:
// dequantise() for a save, quantise() after a load — exact, the scales being
// powers of two (flat_adamw.h in the host says why). Thread-safety: loop
// thread only.
#pragma once

#include <accel/sdk/kernels.hpp>
#include <accel/sdk/precision.hpp>

#include <cstdint>
#include <vector>

#include "model_layout.h"

namespace accel::sharding {

struct MomentFormats {
  DLDataType exp_avg{kDLFloat, 32, 1};
  DLDataType exp_avg_sq{kDLFloat, 32, 1};
  bool scaled() const { return exp_avg.code != kDLFloat || exp_avg_sq.bits != 32; }
};

// The policy's moment dtypes (fp32 where it says default).
MomentFormats moment_formats(const AccelPrecisionPolicy& policy);

// A parameter's part of a moment buffer: param index in the unit's layout,
// and [begin, begin + count) relative to the buffer's first element.
struct MomentPiece {
  size_t param = 0;
  int64_t begin = 0;
  int64_t count = 0;
};

// The pieces of `params` within unit elements `held` (the buffer's range).
std::vector<MomentPiece> moment_pieces(const std::vector<ParamLayout>& params, sdk::FlatRange held);

// out (fp32, same numel) = stored / scale, piece by piece; elements of no
// piece (padding) are left alone.
void dequantize_moments(const sdk::Kernels& ops, const DLTensor& stored, const std::vector<MomentPiece>& pieces,
                        const std::vector<float>& scales, const DLTensor& out);

// stored = fmt(values * scale), each piece's scale chosen from its own amax
// (MS-AMP's rule): for values dequantised from power-of-two scales, every
// one is represented exactly. `scales` is indexed by parameter.
void quantize_moments(const sdk::Kernels& ops, const DLTensor& values, const std::vector<MomentPiece>& pieces,
                      std::vector<float>& scales, const DLTensor& stored);

}  // namespace accel::sharding
