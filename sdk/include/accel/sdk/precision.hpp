// accel/sdk/precision.hpp — the precision policy's numerics (accel/precision.h)
// for the plugins that honour it: the scales, and the scaled FP8 gradient
// codec one implementation of which ddp's all-reduce and the sharding
// machinery's reduce-scatter share (MS-AMP O1's FP8 gradient communication).
//
// The codec, per flat gradient buffer cut into segments (one per tensor):
//   agree_scales: amax of each segment on this rank, one MAX all-reduce of
//     all of them over the reducing group, scale = comm_scale(amax, N);
//   encode: wire[segment] = fp8(grads[segment] * scale);
//   (the caller's SUM collective on the wire, in its FP8 dtype);
//   decode: out = fp32(wire) * (1 / (scale * N)), the average.
// So N ranks' FP8 terms sum without overflow, and the host's comm layer
// adds them in fp32 and rounds once per combine (docs/communication.md).
//
// Thread-safety: loop thread (it issues collectives). Scales live in a small
// device buffer so the casts never sync; agree_scales reads the amaxes back
// once (one device sync per call on GPU ranks).
#pragma once

#include <accel/accel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "accel/sdk/error.hpp"
#include "accel/sdk/flat_shard.hpp"
#include "accel/sdk/kernels.hpp"
#include "accel/sdk/services.hpp"
#include "accel/sdk/tensor.hpp"

namespace accel::sdk {

inline bool is_unset(DLDataType t) noexcept { return t.bits == 0; }
inline bool wants_fp8_grad_comm(const AccelPrecisionPolicy& p) noexcept { return !is_unset(p.grad_comm_dtype); }
inline bool wants_scaled_moments(const AccelPrecisionPolicy& p) noexcept {
  return !is_unset(p.exp_avg_dtype) || !is_unset(p.exp_avg_sq_dtype);
}

// The FP8 wire scale of accel/precision.h: the largest power of two s with
// amax * s * H <= fp8_max, H = N (1 + u)^(N - 2) for N > 2, else N; 1 for a
// zero or non-finite amax.
inline float fp8_comm_scale(float amax, int32_t summands, DLDataType fp8) noexcept {
  if (!(amax > 0.0f) || !std::isfinite(amax)) return 1.0f;
  const bool e5m2 = fp8.code == ACCEL_DL_FLOAT8_E5M2;
  const double fp8_max = e5m2 ? 57344.0 : 448.0;
  const double unit = e5m2 ? 0.125 : 0.0625;
  double headroom = summands < 1 ? 1.0 : static_cast<double>(summands);
  for (int32_t i = 2; i < summands; ++i) headroom *= 1.0 + unit;
  return static_cast<float>(std::ldexp(1.0, static_cast<int>(std::floor(std::log2(fp8_max / (amax * headroom))))));
}

// MS-AMP's moment scale: 2^floor(log2(fmt_max / amax)); 1 for a zero or
// non-finite amax. fmt_max: 448 (E4M3FN), 65504 (f16).
inline float moment_scale(float amax, double fmt_max) noexcept {
  if (!(amax > 0.0f) || !std::isfinite(amax)) return 1.0f;
  return static_cast<float>(std::ldexp(1.0, static_cast<int>(std::floor(std::log2(fmt_max / amax)))));
}
inline double format_max(DLDataType t) noexcept {
  if (t.code == ACCEL_DL_FLOAT8_E4M3FN) return 448.0;
  if (t.code == ACCEL_DL_FLOAT8_E5M2) return 57344.0;
  if (t.code == kDLFloat && t.bits == 16) return 65504.0;
  return 3.4028234663852886e38;
}

// One tensor's gradient on its way through the wire: elements `range` of
// `source` (a flat gradient buffer), packed at `wire_offset` of the wire.
struct GradSegment {
  const DLTensor* source = nullptr;
  FlatRange range;
  int64_t wire_offset = 0;
};

// The segments of one unit's flat gradient buffer `grads`: one per parameter
// stored in it (tied references excluded), packed on the wire from
// `wire_offset` on in flat order.
inline std::vector<GradSegment> unit_grad_segments(const Services& s, int32_t unit, const DLTensor* grads,
                                                   int64_t wire_offset) {
  const AccelModelServices& model = *s.table()->model;
  const AccelUnitInfo* info = nullptr;
  s.check(model.get_unit(s.host(), unit, &info), "model get_unit");
  std::vector<GradSegment> out;
  for (int32_t i = 0; i < info->num_params; ++i) {
    const AccelParamInfo* p = nullptr;
    s.check(model.get_param(s.host(), unit, i, &p), "model get_param");
    if (p->flat_offset < 0) continue;  // a tied reference: the owner's storage
    out.push_back(GradSegment{grads, FlatRange{p->flat_offset, p->flat_offset + p->numel}, wire_offset + p->flat_offset});
  }
  return out;
}

// The scales one agree_scales call chose: per segment, on the host, and on
// the device beside the decode factors 1 / (scale * N).
struct Fp8Scales {
  std::vector<float> host;
  Buffer device;  // [2n]: scales, then decode factors
};

class Fp8GradComm {
 public:
  // `wire`: the policy's grad_comm_dtype; `group`: the reducing group.
  Fp8GradComm(const Kernels& ops, DLDataType wire, AccelGroup* group)
      : ops_(ops), wire_(wire), group_(group), size_(ops.shape(group).size) {}

  DLDataType wire_dtype() const noexcept { return wire_; }
  int32_t group_size() const noexcept { return size_; }

  // Per segment, the scale every rank of the group agrees on (one MAX
  // all_reduce of all the segments' amaxes, labelled `label`). `wire` is
  // the wire buffer: the amaxes come from casts into it, which encode
  // overwrites.
  Fp8Scales agree_scales(const std::vector<GradSegment>& segments, const DLTensor& wire,
                                         const char* label) {
    const auto n = static_cast<int64_t>(segments.size());
    Buffer amaxes = ops_.allocate(ACCEL_MEMORY_COMM, DLDataType{kDLFloat, 32, 1}, std::max<int64_t>(1, n),
                                  ACCEL_MEMORY_DEVICE, true, "fp8 gradient amaxes");
    for (int64_t i = 0; i < n; ++i) {
      const GradSegment& g = segments[static_cast<size_t>(i)];
      if (g.range.empty()) continue;
      const FlatView in(*g.source, g.range.begin, g.range.size());
      const FlatView out(wire, g.wire_offset, g.range.size());
      const FlatView amax(amaxes.tensor(), i, 1);
      ops_.cast(in.get(), out.get(), nullptr, amax.get(), false);
    }
    const FlatView agreed_view(amaxes.tensor(), 0, n);
    if (size_ > 1 && n > 0) ops_.all_reduce(group_, agreed_view.get(), ACCEL_REDUCE_MAX, label);
    const std::vector<float> agreed = n > 0 ? ops_.read_floats(*agreed_view.get()) : std::vector<float>{};
    Fp8Scales scales;
    scales.host.assign(static_cast<size_t>(n), 1.0f);
    std::vector<float> values(static_cast<size_t>(2 * std::max<int64_t>(1, n)), 1.0f);
    for (int64_t i = 0; i < n; ++i) {
      const float s = fp8_comm_scale(agreed[static_cast<size_t>(i)], size_, wire_);
      scales.host[static_cast<size_t>(i)] = s;
      values[static_cast<size_t>(i)] = s;
      values[static_cast<size_t>(n + i)] = 1.0f / (s * static_cast<float>(size_));
    }
    scales.device = ops_.allocate(ACCEL_MEMORY_COMM, DLDataType{kDLFloat, 32, 1},
                                  static_cast<int64_t>(values.size()), ACCEL_MEMORY_DEVICE, false,
                                  "fp8 gradient scales");
    const FlatView host(values.data(), static_cast<int64_t>(values.size()));
    ops_.copy(host.get(), &scales.device.tensor());
    return scales;
  }

  // wire[g.wire_offset ...] = fp8(g.source[g.range] * scale) per segment.
  void encode(const std::vector<GradSegment>& segments, const Fp8Scales& scales, const DLTensor& wire) const {
    for (size_t i = 0; i < segments.size(); ++i) {
      const GradSegment& g = segments[i];
      if (g.range.empty()) continue;
      const FlatView in(*g.source, g.range.begin, g.range.size());
      const FlatView out(wire, g.wire_offset, g.range.size());
      const FlatView scale(scales.device.tensor(), static_cast<int64_t>(i), 1);
      ops_.cast(in.get(), out.get(), scale.get(), nullptr, false);
    }
  }

  // The reduced wire back into the segments' sources (an all_reduce):
  // g.source[g.range] = fp32(wire[...]) / (scale * N).
  void decode_to_sources(const DLTensor& wire, const std::vector<GradSegment>& segments,
                         const Fp8Scales& scales) const {
    const auto n = static_cast<int64_t>(segments.size());
    for (int64_t i = 0; i < n; ++i) {
      const GradSegment& g = segments[static_cast<size_t>(i)];
      if (g.range.empty()) continue;
      const FlatView in(wire, g.wire_offset, g.range.size());
      const FlatView out(*g.source, g.range.begin, g.range.size());
      const FlatView factor(scales.device.tensor(), n + i, 1);
      ops_.cast(in.get(), out.get(), factor.get(), nullptr, false);
    }
  }

  // This rank's chunk of a reduce_scatter: `chunk` holds wire elements
  // [wire_range.begin, wire_range.end); out[e - wire_range.begin] =
  // fp32(chunk[...]) / (scale * N) for every element e of a segment; the
  // rest of `out` (padding) is left alone.
  void decode_range(const DLTensor& chunk, FlatRange wire_range, const std::vector<GradSegment>& segments,
                    const Fp8Scales& scales, const DLTensor& out) const {
    const auto n = static_cast<int64_t>(segments.size());
    for (int64_t i = 0; i < n; ++i) {
      const GradSegment& g = segments[static_cast<size_t>(i)];
      const FlatRange part =
          intersect(wire_range, FlatRange{g.wire_offset, g.wire_offset + g.range.size()});
      if (part.empty()) continue;
      const FlatView in(chunk, part.begin - wire_range.begin, part.size());
      const FlatView dst(out, part.begin - wire_range.begin, part.size());
      const FlatView factor(scales.device.tensor(), n + i, 1);
      ops_.cast(in.get(), dst.get(), factor.get(), nullptr, false);
    }
  }

 private:
  const Kernels& ops_;
  DLDataType wire_;
  AccelGroup* group_;
  int32_t size_;
};

}  // namespace accel::sdk
