// Rotary frequencies of every rope_type (see rotary.h). Each function
// follows transformers' modeling_rope_utils.py line by line; where Python
// mixes scalars and tensors the same ATen operation is called here, and
// Python's `s / t` is t.reciprocal() * s (torch's Tensor.__rdiv__), so the
// fp32 bits agree with transformers'.
#include "host/model/rotary.h"

#include <algorithm>
#include <cmath>

namespace accel::model {
namespace {

// arange(0, dim, 2) as fp32, divided by dim: the exponents of the base.
at::Tensor base_exponents(int64_t dim, at::Device device) {
  return at::arange(0, dim, 2, at::TensorOptions().dtype(at::kLong).device(device)).to(at::kFloat) /
         static_cast<double>(dim);
}

// 1 / base^(2i / dim): the default embedding's frequencies.
at::Tensor default_frequencies(int64_t dim, double base, at::Device device) {
  return at::pow(base, base_exponents(dim, device)).reciprocal() * 1.0;
}

// _compute_llama3_parameters on the default frequencies (Python's `2 * pi /
// wavelen` style divisions written as transformers' reciprocal products).
at::Tensor llama3_frequencies(const at::Tensor& inv_freq, const RopeScaling& r) {
  const auto old_context = static_cast<double>(r.original_max_position);
  const double low_freq_wavelen = old_context / r.low_freq_factor;
  const double high_freq_wavelen = old_context / r.high_freq_factor;
  const at::Tensor wavelen = inv_freq.reciprocal() * (2.0 * M_PI);
  at::Tensor scaled = at::where(wavelen > low_freq_wavelen, inv_freq / r.factor, inv_freq);
  const at::Tensor smooth =
      (wavelen.reciprocal() * old_context - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
  const at::Tensor smoothed = (1.0 - smooth) * scaled / r.factor + smooth * scaled;
  const at::Tensor medium = (wavelen < high_freq_wavelen).logical_not() * (wavelen > low_freq_wavelen).logical_not();
  return at::where(medium, smoothed, scaled);
}

// _compute_dynamic_ntk_parameters: up to max_position_embeddings positions
// the base from Python floats (the frequencies computed at init); beyond,
// transformers recomputes with seq_len a 0-dim int64 tensor, so the base
// becomes an fp32 tensor and the power an fp32 tensor power.
at::Tensor dynamic_frequencies(int64_t dim, double theta, const RopeScaling& r, int64_t seq_len, at::Device device) {
  const double exponent = static_cast<double>(dim) / static_cast<double>(dim - 2);
  const auto max_position = static_cast<double>(r.original_max_position);
  if (seq_len <= r.original_max_position) {
    const double base = theta * std::pow(r.factor * max_position / max_position - (r.factor - 1.0), exponent);
    return default_frequencies(dim, base, device);
  }
  const at::Tensor length = at::scalar_tensor(seq_len, at::TensorOptions().dtype(at::kLong).device(device));
  const at::Tensor base =
      at::pow(length * r.factor / r.original_max_position - (r.factor - 1.0), exponent) * theta;
  return at::pow(base, base_exponents(dim, device)).reciprocal() * 1.0;
}

// yarn's mscale: 0.1 * mscale * ln(scale) + 1 (1 for scale <= 1).
double yarn_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

RotaryFrequencies yarn_frequencies(int64_t dim, double base, const RopeScaling& r, at::Device device) {
  RotaryFrequencies out;
  if (r.attention_factor) {
    out.attention_factor = *r.attention_factor;
  } else if (r.mscale != 0.0 && r.mscale_all_dim != 0.0) {
    out.attention_factor = yarn_mscale(r.factor, r.mscale) / yarn_mscale(r.factor, r.mscale_all_dim);
  } else {
    out.attention_factor = yarn_mscale(r.factor, 1.0);
  }
  const auto original = static_cast<double>(r.original_max_position);
  auto correction_dim = [&](double rotations) {
    return (static_cast<double>(dim) * std::log(original / (rotations * 2.0 * M_PI))) / (2.0 * std::log(base));
  };
  double low = correction_dim(r.beta_fast), high = correction_dim(r.beta_slow);
  if (r.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
  const at::Tensor pos_freqs = at::pow(base, base_exponents(dim, device));
  const at::Tensor extrapolation = pos_freqs.reciprocal() * 1.0;
  const at::Tensor interpolation = (pos_freqs * r.factor).reciprocal() * 1.0;
  const at::Tensor ramp =
      at::clamp((at::arange(dim / 2, at::TensorOptions().dtype(at::kFloat)) - low) / (high - low), 0, 1).to(device);
  const at::Tensor extrapolation_factor = 1 - ramp;
  out.inverse = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor;
  return out;
}

RotaryFrequencies longrope_frequencies(int64_t dim, double base, const RopeScaling& r, int64_t seq_len,
                                       at::Device device) {
  RotaryFrequencies out;
  if (r.attention_factor) {
    out.attention_factor = *r.attention_factor;
  } else if (r.factor > 1.0) {
    out.attention_factor =
        std::sqrt(1.0 + std::log(r.factor) / std::log(static_cast<double>(r.original_max_position)));
  }
  const std::vector<double>& factors = seq_len > r.original_max_position ? r.long_factor : r.short_factor;
  const at::Tensor ext_factors =
      at::tensor(at::ArrayRef<double>(factors), at::TensorOptions().dtype(at::kDouble)).to(at::kFloat).to(device);
  out.inverse = (ext_factors * at::pow(base, base_exponents(dim, device))).reciprocal() * 1.0;
  return out;
}

}  // namespace

RotaryFrequencies rotary_frequencies(int64_t dim, double theta, const RopeScaling& scaling, int64_t seq_len,
                                     at::Device device) {
  using Kind = RopeScaling::Kind;
  switch (scaling.kind) {
    case Kind::none:
      return {default_frequencies(dim, theta, device), 1.0};
    case Kind::llama3:
      return {llama3_frequencies(default_frequencies(dim, theta, device), scaling), 1.0};
    case Kind::linear:
      return {default_frequencies(dim, theta, device) / scaling.factor, 1.0};
    case Kind::dynamic:
      return {dynamic_frequencies(dim, theta, scaling, seq_len, device), 1.0};
    case Kind::yarn:
      return yarn_frequencies(dim, theta, scaling, device);
    case Kind::longrope:
      return longrope_frequencies(dim, theta, scaling, seq_len, device);
  }
  return {default_frequencies(dim, theta, device), 1.0};
}

std::pair<at::Tensor, at::Tensor> rotary_angles(const at::Tensor& positions, int64_t rotary_dim, double theta,
                                                const RopeScaling& scaling, int64_t seq_len) {
  const RotaryFrequencies frequencies = rotary_frequencies(rotary_dim, theta, scaling, seq_len, positions.device());
  const at::Tensor freqs = at::outer(positions, frequencies.inverse);  // [T, rotary_dim / 2]
  const at::Tensor angles = at::cat({freqs, freqs}, -1);
  if (frequencies.attention_factor == 1.0) return {angles.cos(), angles.sin()};
  return {angles.cos() * frequencies.attention_factor, angles.sin() * frequencies.attention_factor};
}

}  // namespace accel::model
