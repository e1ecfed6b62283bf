// scaled_moments.cpp — the moments' scaled formats (see scaled_moments.h).
#include "scaled_moments.h"

#include <accel/sdk/tensor.hpp>

namespace accel::sharding {

MomentFormats moment_formats(const AccelPrecisionPolicy& policy) {
  MomentFormats f;
  if (!sdk::is_unset(policy.exp_avg_dtype)) f.exp_avg = policy.exp_avg_dtype;
  if (!sdk::is_unset(policy.exp_avg_sq_dtype)) f.exp_avg_sq = policy.exp_avg_sq_dtype;
  return f;
}

std::vector<MomentPiece> moment_pieces(const std::vector<ParamLayout>& params, sdk::FlatRange held) {
  std::vector<MomentPiece> out;
  for (size_t i = 0; i < params.size(); ++i) {
    const sdk::FlatRange part =
        sdk::intersect(held, sdk::FlatRange{params[i].flat_offset, params[i].flat_offset + params[i].numel});
    if (part.empty()) continue;
    out.push_back(MomentPiece{i, part.begin - held.begin, part.size()});
  }
  return out;
}

void dequantize_moments(const sdk::Kernels& ops, const DLTensor& stored, const std::vector<MomentPiece>& pieces,
                        const std::vector<float>& scales, const DLTensor& out) {
  for (const MomentPiece& p : pieces) {
    float inverse = 1.0f / scales.at(p.param);  // a power of two: exact
    const sdk::ScalarView factor(&inverse);
    const sdk::FlatView in(stored, p.begin, p.count);
    const sdk::FlatView to(out, p.begin, p.count);
    ops.cast(in.get(), to.get(), factor.get(), nullptr, false);
  }
}

void quantize_moments(const sdk::Kernels& ops, const DLTensor& values, const std::vector<MomentPiece>& pieces,
                      std::vector<float>& scales, const DLTensor& stored) {
  const double fmt_max = sdk::format_max(stored.dtype);
  for (const MomentPiece& p : pieces) {
    const sdk::FlatView in(values, p.begin, p.count);
    const sdk::FlatView to(stored, p.begin, p.count);
    float amax = 0.0f;
    const sdk::ScalarView amax_view(&amax);
    ops.cast(in.get(), to.get(), nullptr, amax_view.get(), false);  // amax only; overwritten below
    float scale = sdk::moment_scale(amax, fmt_max);
    scales.at(p.param) = scale;
    const sdk::ScalarView scale_view(&scale);
    ops.cast(in.get(), to.get(), scale_view.get(), nullptr, false);
  }
}

}  // namespace accel::sharding
