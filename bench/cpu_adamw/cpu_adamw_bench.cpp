// Times CpuAdamW::step (plugins/sharding/cpu_adamw.h) on --numel fp32
// elements with --threads threads: --warmup untimed steps, then --steps
// timed ones; prints the median and fastest step and the bandwidth of the
// median. Bytes counted per element: 28 — param, grad, exp_avg and
// exp_avg_sq read (4 x 4 B), param, exp_avg and exp_avg_sq written (3 x 4 B).
// Every written line is read first, so no extra write-allocate traffic is
// hidden; the count is what a fused pass must move at least.
//
//   cpu_adamw_bench [--numel N] [--threads T] [--steps S] [--warmup W]
//                   [--min-parallel M]
//
// --min-parallel sets CpuAdamW's threshold below which the caller steps
// alone (default: the library's); 0 splits every call, to find the
// crossover.
// The last line is key=value pairs for bench/cpu_adamw.py.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "sharding/cpu_adamw.h"

using accel::sharding::CpuAdamW;
using accel::sharding::CpuAdamWHyper;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  int64_t numel = 16 << 20;
  int threads = 1;
  int steps = 20;
  int warmup = 3;
  int64_t min_parallel = CpuAdamW::kDefaultMinParallelElements;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "cpu_adamw_bench: %s\nusage: cpu_adamw_bench [--numel N] [--threads T] [--steps S] [--warmup W] "
               "[--min-parallel M]\n",
               why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) usage(("missing value for " + arg).c_str());
    const long long value = std::atoll(argv[++i]);
    if (arg == "--numel") {
      o.numel = value;
    } else if (arg == "--threads") {
      o.threads = static_cast<int>(value);
    } else if (arg == "--steps") {
      o.steps = static_cast<int>(value);
    } else if (arg == "--warmup") {
      o.warmup = static_cast<int>(value);
    } else if (arg == "--min-parallel") {
      o.min_parallel = value;
    } else {
      usage(("unknown option " + arg).c_str());
    }
  }
  if (o.numel < 1 || o.threads < 0 || o.steps < 1 || o.warmup < 0 || o.min_parallel < 0) usage("values must be positive");
  return o;
}

// 64-byte aligned, as torch's CPU allocator gives, so the chunk boundaries
// (multiples of 64 elements) fall on cache lines.
struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using Floats = std::unique_ptr<float[], FreeDeleter>;

Floats floats(int64_t n, float value) {
  const size_t bytes = (static_cast<size_t>(n) * sizeof(float) + 63) / 64 * 64;
  Floats p(static_cast<float*>(std::aligned_alloc(64, bytes)));
  if (!p) usage("out of memory");
  std::fill(p.get(), p.get() + n, value);  // touches every page before timing
  return p;
}

const char* clone_in_use() {
  // The order GCC's resolver tries them (cpu_adamw.cpp's target_clones).
  if (__builtin_cpu_supports("avx512f")) return "avx512f";
  if (__builtin_cpu_supports("avx2")) return "avx2";
  return "default";
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  Floats param = floats(o.numel, 0.5f);
  Floats grad = floats(o.numel, 0.0f);
  for (int64_t i = 0; i < o.numel; ++i) grad[i] = static_cast<float>((i % 1009) - 504) * 1e-3f;
  Floats exp_avg = floats(o.numel, 0.0f);
  Floats exp_avg_sq = floats(o.numel, 0.0f);

  CpuAdamW adam(o.threads, o.min_parallel);
  CpuAdamWHyper h;
  h.lr = 1e-3;
  h.beta1 = 0.9;
  h.beta2 = 0.999;
  h.eps = 1e-8;
  h.weight_decay = 0.01;
  std::vector<double> ms;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    h.step = s + 1;
    const Clock::time_point t = Clock::now();
    adam.step(param.get(), grad.get(), exp_avg.get(), exp_avg_sq.get(), o.numel, h);
    const double elapsed = std::chrono::duration<double, std::milli>(Clock::now() - t).count();
    if (s >= o.warmup) ms.push_back(elapsed);
  }
  std::sort(ms.begin(), ms.end());
  const double median = ms.size() % 2 ? ms[ms.size() / 2] : (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]) / 2;
  const double bytes = 28.0 * static_cast<double>(o.numel);
  const double gbps = bytes / (median * 1e-3) / 1e9;
  std::printf("CpuAdamW: %lld elements, %d threads (%s clone), %d steps after %d warm-up: median %.3f ms, "
              "fastest %.3f ms, %.1f GB/s at the median (28 B per element)\n",
              static_cast<long long>(o.numel), adam.threads(), clone_in_use(), o.steps, o.warmup, median, ms.front(),
              gbps);
  std::printf("numel=%lld threads=%d clone=%s median_ms=%.4f min_ms=%.4f gbps=%.2f\n", static_cast<long long>(o.numel),
              adam.threads(), clone_in_use(), median, ms.front(), gbps);
  return 0;
}
