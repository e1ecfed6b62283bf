// Counter-based normal deviates (see seeded_init.h): splitmix64 over
// (key, 2i) and (key, 2i+1) feeds one Box-Muller transform per element.
#include "host/model/seeded_init.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "host/util/random.h"

namespace accel::model {
namespace {

// Uniform in (0, 1]: never 0, so log() below is finite.
double unit_interval(uint64_t bits) { return (static_cast<double>(bits >> 11) + 1.0) * 0x1.0p-53; }

}  // namespace

uint64_t parameter_stream_key(uint64_t seed, std::string_view name) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a over the name
  for (unsigned char c : name) h = (h ^ c) * 0x100000001B3ull;
  return splitmix64(seed ^ splitmix64(h));
}

double seeded_normal(uint64_t stream_key, uint64_t index) {
  const double u1 = unit_interval(splitmix64(stream_key ^ splitmix64(2 * index)));
  const double u2 = unit_interval(splitmix64(stream_key ^ splitmix64(2 * index + 1)));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

void init_parameter_slice(const ParamSpec& spec, uint64_t seed, int64_t begin, int64_t count,
                          float* dst) {
  switch (spec.init) {
    case InitKind::zeros:
      std::fill(dst, dst + count, 0.0f);
      return;
    case InitKind::ones:
      std::fill(dst, dst + count, 1.0f);
      return;
    case InitKind::normal: {
      const uint64_t key = parameter_stream_key(seed, spec.name);
      const double std_dev = spec.init_std;
      at::parallel_for(0, count, 1 << 14, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) {
          dst[i] = static_cast<float>(std_dev * seeded_normal(key, static_cast<uint64_t>(begin + i)));
        }
      });
      return;
    }
  }
}

}  // namespace accel::model
