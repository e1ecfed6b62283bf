// cpu_adamw.cpp — the fused host AdamW step and its thread pool (see
// cpu_adamw.h).
//
// Built with -fno-math-errno (so std::sqrt(float) becomes a vector sqrt
// rather than a call that may set errno) and -ffp-contract=off (no fused
// multiply-add: the avx512f, avx2 and default clones then round every
// operation alike, and a chunk's result does not depend on the clone or on
// where the chunk boundaries fall); plugins/sharding/CMakeLists.txt sets
// both on this file alone. objdump -d of the object (GCC 12) shows the avx2
// clone (the symbol ending .avx2) looping over ymm registers with vsqrtps
// and vdivps and no vfmadd, the avx512f clone over zmm, the default one over
// xmm with sqrtps.
//
// torch's own single-tensor path is not bit-reproducible across ISAs: on
// AVX2/AVX-512 its lerp_ and addcmul_ use fused multiply-adds and its
// float sqrt is not correctly rounded (torch 2.11: about 20 % of results
// 1 ulp off), so the two agree to a few ulp, not bit for bit. (Its lerp_
// also switches to end - (end - self) * (1 - weight) for weights >= 0.5,
// i.e. beta1 <= 0.5; this kernel keeps one formula.)
#include "cpu_adamw.h"

#include <accel/sdk/error.hpp>

#include <algorithm>
#include <cmath>
#include <string>

namespace accel::sharding {
namespace {

using sdk::Error;

constexpr int64_t kAlign = 64;  // chunk boundaries: 256 bytes, whole cache lines and vectors

struct Scalars {
  float grad_scale, decay, beta1_weight, beta2, beta2_weight, bias_correction2_sqrt, eps, step_size;
};

// The per-element update in torch's order (cpu_adamw.h). kDecay is a
// template argument so the weight-decay test is out of the loop.
template <bool kDecay>
inline __attribute__((always_inline)) void adamw_elements(float* __restrict param, const float* __restrict grad,
                                                          float* __restrict exp_avg, float* __restrict exp_avg_sq,
                                                          int64_t n, const Scalars s) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * s.grad_scale;
    float p = param[i];
    if (kDecay) p = p * s.decay;
    float m = exp_avg[i];
    m = m + s.beta1_weight * (g - m);
    float v = exp_avg_sq[i];
    v = v * s.beta2 + s.beta2_weight * g * g;
    const float denom = std::sqrt(v) / s.bias_correction2_sqrt + s.eps;
    p = p - s.step_size * m / denom;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    param[i] = p;
  }
}

// One clone per instruction set, chosen once at load time by an ifunc
// resolver (GCC function multiversioning). ThreadSanitizer instruments that
// resolver, which then runs at relocation time, before the sanitizer's
// runtime is up, and crashes the process at load: a TSan build keeps the
// default clone alone (the pool is what it checks; a chunk shares nothing).
#if defined(__SANITIZE_THREAD__)
#define ACCEL_ADAMW_CLONES
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ACCEL_ADAMW_CLONES
#endif
#endif
#ifndef ACCEL_ADAMW_CLONES
#define ACCEL_ADAMW_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
ACCEL_ADAMW_CLONES void adamw_chunk(
    float* __restrict param, const float* __restrict grad, float* __restrict exp_avg, float* __restrict exp_avg_sq,
    int64_t n, const Scalars s, bool decays) {
  if (decays) {
    adamw_elements<true>(param, grad, exp_avg, exp_avg_sq, n, s);
  } else {
    adamw_elements<false>(param, grad, exp_avg, exp_avg_sq, n, s);
  }
}

}  // namespace

// ---- The pool ---------------------------------------------------------------

CpuAdamW::CpuAdamW(int threads, int64_t min_parallel_elements) : min_parallel_elements_(min_parallel_elements) {
  if (threads < 0) {
    throw Error(ACCEL_ERROR_INVALID_ARGUMENT, "CpuAdamW: threads must be >= 0 (0: one per hardware thread), got " +
                                                  std::to_string(threads));
  }
  if (min_parallel_elements < 0) {
    throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                "CpuAdamW: min_parallel_elements must be >= 0, got " + std::to_string(min_parallel_elements));
  }
  if (threads == 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  workers_.reserve(static_cast<size_t>(threads - 1));
  try {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
  } catch (...) {
    stop_workers();  // the destructor does not run for a throwing constructor
    throw;
  }
}

CpuAdamW::~CpuAdamW() { stop_workers(); }

void CpuAdamW::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void CpuAdamW::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_chunk(call_, index);  // call_ is not written again before running_ reaches 0
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--running_ == 0) finish_.notify_one();
    }
  }
}

void CpuAdamW::run_chunk(const Call& c, int index) {
  const int64_t begin = std::min(c.n, index * c.chunk);
  const int64_t end = std::min(c.n, begin + c.chunk);
  if (begin == end) return;
  const Scalars s{c.grad_scale, c.decay, c.beta1_weight, c.beta2, c.beta2_weight, c.bias_correction2_sqrt,
                  c.eps,        c.step_size};
  adamw_chunk(c.param + begin, c.grad + begin, c.exp_avg + begin, c.exp_avg_sq + begin, end - begin, s, c.decays);
}

// ---- The step ---------------------------------------------------------------

void CpuAdamW::step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                    const CpuAdamWHyper& h) {
  if (n < 0) throw Error(ACCEL_ERROR_INVALID_ARGUMENT, "CpuAdamW: n must be >= 0, got " + std::to_string(n));
  if (h.step < 1) throw Error(ACCEL_ERROR_INVALID_ARGUMENT, "CpuAdamW: step must be >= 1, got " + std::to_string(h.step));
  if (!(h.beta1 >= 0.0 && h.beta1 < 1.0 && h.beta2 >= 0.0 && h.beta2 < 1.0)) {
    throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                sdk::format("CpuAdamW: betas must lie in [0, 1), got %g, %g", h.beta1, h.beta2));
  }
  if (n == 0) return;
  if (param == nullptr || grad == nullptr || exp_avg == nullptr || exp_avg_sq == nullptr) {
    throw Error(ACCEL_ERROR_INVALID_ARGUMENT, "CpuAdamW: a buffer is null");
  }

  // As torch.optim.AdamW's single-tensor path: the scalars in double, each
  // rounded to float once where the tensor op meets it.
  const double bias_correction1 = 1.0 - std::pow(h.beta1, static_cast<double>(h.step));
  const double bias_correction2 = 1.0 - std::pow(h.beta2, static_cast<double>(h.step));
  Call c;
  c.param = param;
  c.grad = grad;
  c.exp_avg = exp_avg;
  c.exp_avg_sq = exp_avg_sq;
  c.n = n;
  c.grad_scale = h.grad_scale;
  c.decays = h.weight_decay != 0.0;
  c.decay = static_cast<float>(1.0 - h.lr * h.weight_decay);
  c.beta1_weight = static_cast<float>(1.0 - h.beta1);
  c.beta2 = static_cast<float>(h.beta2);
  c.beta2_weight = static_cast<float>(1.0 - h.beta2);
  c.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  c.eps = static_cast<float>(h.eps);
  c.step_size = static_cast<float>(h.lr / bias_correction1);

  if (workers_.empty() || n < min_parallel_elements_) {
    c.chunk = n;
    run_chunk(c, 0);
    return;
  }
  const int64_t per_thread = (n + threads() - 1) / threads();
  c.chunk = (per_thread + kAlign - 1) / kAlign * kAlign;
  {
    std::lock_guard<std::mutex> lock(mu_);
    call_ = c;
    running_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  start_.notify_all();
  run_chunk(c, 0);
  std::unique_lock<std::mutex> lock(mu_);
  finish_.wait(lock, [this] { return running_ == 0; });
}

}  // namespace accel::sharding
