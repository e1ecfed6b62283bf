// cpu_adamw_test.cpp — the fused host AdamW (CpuAdamW) against AdamW in
// double precision written here, against its own definition in scalar
// float bit for bit (so the vector clone the CPU picks rounds as the plain
// loop would), bit-identical across thread counts, and rejecting bad input
// without writing anything. This file is compiled with -ffp-contract=off
// (tests/sdk/CMakeLists.txt) so its float replica has no fused
// multiply-add either.
#include <gtest/gtest.h>

#include <accel/sdk/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../cpu_adamw.h"

namespace accel::sharding {
namespace {

// The tests split calls from 32K elements on: the default threshold is a
// matter of speed and larger, and this keeps the sizes here small with
// both paths (the caller alone, the pool) run.
constexpr int64_t kSplitFrom = 32 * 1024;

// ---- State and references ---------------------------------------------------

struct FloatState {
  std::vector<float> param, exp_avg, exp_avg_sq;
};

struct DoubleState {
  std::vector<double> param, exp_avg, exp_avg_sq;
};

// Parameters in ±[0.5, 1.5]: 20 steps of at most a few lr each cannot bring
// one near zero, where a relative error would mean nothing.
FloatState initial_state(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> magnitude(0.5f, 1.5f);
  std::bernoulli_distribution negative(0.5);
  FloatState s;
  for (int64_t i = 0; i < n; ++i) s.param.push_back(negative(rng) ? -magnitude(rng) : magnitude(rng));
  s.exp_avg.assign(static_cast<size_t>(n), 0.0f);
  s.exp_avg_sq.assign(static_cast<size_t>(n), 0.0f);
  return s;
}

DoubleState widen(const FloatState& s) {
  const auto wide = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
  return DoubleState{wide(s.param), wide(s.exp_avg), wide(s.exp_avg_sq)};
}

// Per step, per element: normal noise times a per-element scale spanning
// 1e-4 to 1e2 (gradients of different layers differ by orders of
// magnitude), and every 97th element exactly zero.
class Gradients {
 public:
  Gradients(int64_t n, uint32_t seed) : rng_(seed), scale_(static_cast<size_t>(n)) {
    std::uniform_real_distribution<double> exponent(-4.0, 2.0);
    for (float& s : scale_) s = static_cast<float>(std::pow(10.0, exponent(rng_)));
  }
  std::vector<float> next() {
    std::normal_distribution<float> noise(0.0f, 1.0f);
    std::vector<float> g(scale_.size());
    for (size_t i = 0; i < g.size(); ++i) g[i] = i % 97 == 0 ? 0.0f : noise(rng_) * scale_[i];
    return g;
  }

 private:
  std::mt19937 rng_;
  std::vector<float> scale_;
};

// torch.optim.AdamW's single-tensor update, in double.
void reference_step(DoubleState& s, const std::vector<float>& grad, const CpuAdamWHyper& h) {
  const double bias_correction1 = 1.0 - std::pow(h.beta1, static_cast<double>(h.step));
  const double bias_correction2 = 1.0 - std::pow(h.beta2, static_cast<double>(h.step));
  for (size_t i = 0; i < grad.size(); ++i) {
    const double g = static_cast<double>(grad[i]) * static_cast<double>(h.grad_scale);
    double& p = s.param[i];
    double& m = s.exp_avg[i];
    double& v = s.exp_avg_sq[i];
    p *= 1.0 - h.lr * h.weight_decay;
    m += (1.0 - h.beta1) * (g - m);
    v = v * h.beta2 + (1.0 - h.beta2) * g * g;
    const double denom = std::sqrt(v) / std::sqrt(bias_correction2) + h.eps;
    p -= h.lr / bias_correction1 * m / denom;
  }
}

// The update as cpu_adamw.h defines it, in scalar float: what every vector
// clone of the kernel must reproduce bit for bit.
void float_replica_step(FloatState& s, const std::vector<float>& grad, const CpuAdamWHyper& h) {
  const double bias_correction1 = 1.0 - std::pow(h.beta1, static_cast<double>(h.step));
  const double bias_correction2 = 1.0 - std::pow(h.beta2, static_cast<double>(h.step));
  const auto decay = static_cast<float>(1.0 - h.lr * h.weight_decay);
  const auto beta1_weight = static_cast<float>(1.0 - h.beta1);
  const auto beta2 = static_cast<float>(h.beta2);
  const auto beta2_weight = static_cast<float>(1.0 - h.beta2);
  const auto bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  const auto eps = static_cast<float>(h.eps);
  const auto step_size = static_cast<float>(h.lr / bias_correction1);
  for (size_t i = 0; i < grad.size(); ++i) {
    const float g = grad[i] * h.grad_scale;
    float& p = s.param[i];
    float& m = s.exp_avg[i];
    float& v = s.exp_avg_sq[i];
    if (h.weight_decay != 0.0) p = p * decay;
    m = m + beta1_weight * (g - m);
    v = v * beta2 + beta2_weight * g * g;
    const float denom = std::sqrt(v) / bias_correction2_sqrt + eps;
    p = p - step_size * m / denom;
  }
}

CpuAdamWHyper hyper(int64_t step, double weight_decay = 0.01, float grad_scale = 1.0f) {
  CpuAdamWHyper h;
  h.lr = 1e-3;
  h.beta1 = 0.9;
  h.beta2 = 0.999;
  h.eps = 1e-8;
  h.weight_decay = weight_decay;
  h.step = step;
  h.grad_scale = grad_scale;
  return h;
}

void kernel_step(CpuAdamW& adam, FloatState& s, const std::vector<float>& grad, const CpuAdamWHyper& h) {
  adam.step(s.param.data(), grad.data(), s.exp_avg.data(), s.exp_avg_sq.data(), static_cast<int64_t>(grad.size()), h);
}

// `steps` steps of the kernel on `threads` threads from the same start.
FloatState run_kernel(int threads, int64_t n, int steps, double weight_decay = 0.01, float grad_scale = 1.0f) {
  CpuAdamW adam(threads, kSplitFrom);
  FloatState s = initial_state(n, 1);
  Gradients grads(n, 2);
  for (int t = 1; t <= steps; ++t) kernel_step(adam, s, grads.next(), hyper(t, weight_decay, grad_scale));
  return s;
}

bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// ---- Against AdamW in double ------------------------------------------------

// The bound. Each step rounds a parameter three times relative to itself
// (the decay factor 1 - lr*wd to float, the decayed product, the
// subtraction of the update): 3u per step with u = 2^-24 ≈ 6e-8, so 60u ≈
// 3.6e-6 after 20 steps at worst, errors adding with the same sign. The
// update's own error (a dozen roundings through m, v, sqrt and two
// divisions, plus the scalars rounded to float) is relative to the update,
// at most a few lr ≈ 1e-2 of |param| here: ≈ 1e-8, negligible. exp_avg_sq
// sums positive terms, each step rounding ≤ 4 times relative to the sum
// (beta2 and 1 - beta2 to float, product, sum): ≤ 80u ≈ 4.8e-6. exp_avg
// averages gradients of either sign and may sit near zero, so its error is
// measured against the largest |g| it averaged, again ≤ 4u per step. One
// bound, 1e-5 ≈ 170u, covers the three with twice the worst case to spare;
// a wrong operation (say lr where lr/bias_correction1 belongs) is off by
// orders of magnitude more.
constexpr double kTolerance = 1e-5;

struct Errors {
  double param = 0.0, exp_avg = 0.0, exp_avg_sq = 0.0;
};

Errors against_reference(int threads, int64_t n, int steps, double weight_decay, float grad_scale) {
  CpuAdamW adam(threads, kSplitFrom);
  FloatState s = initial_state(n, 1);
  DoubleState ref = widen(s);
  Gradients grads(n, 2);
  std::vector<double> largest_g(static_cast<size_t>(n), 0.0);
  for (int t = 1; t <= steps; ++t) {
    const std::vector<float> g = grads.next();
    const CpuAdamWHyper h = hyper(t, weight_decay, grad_scale);
    kernel_step(adam, s, g, h);
    reference_step(ref, g, h);
    for (size_t i = 0; i < g.size(); ++i) {
      largest_g[i] = std::max(largest_g[i], std::fabs(static_cast<double>(g[i]) * grad_scale));
    }
  }
  Errors e;
  for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
    e.param = std::max(e.param, std::fabs(s.param[i] - ref.param[i]) / std::fabs(ref.param[i]));
    if (ref.exp_avg_sq[i] > 0.0) {
      e.exp_avg_sq = std::max(e.exp_avg_sq, std::fabs(s.exp_avg_sq[i] - ref.exp_avg_sq[i]) / ref.exp_avg_sq[i]);
    } else {
      EXPECT_EQ(s.exp_avg_sq[i], 0.0f) << "element " << i;
    }
    if (largest_g[i] > 0.0) {
      e.exp_avg = std::max(e.exp_avg, std::fabs(s.exp_avg[i] - ref.exp_avg[i]) / largest_g[i]);
    } else {
      EXPECT_EQ(s.exp_avg[i], 0.0f) << "element " << i;
    }
  }
  return e;
}

constexpr int64_t kElements = 100'003;  // not a multiple of 64; split from kSplitFrom
constexpr int kSteps = 20;

TEST(CpuAdamW, TwentyStepsAgreeWithAdamWInDoubleWithinRoundingOnTwoThreads) {
  const Errors e = against_reference(2, kElements, kSteps, 0.01, 1.0f);
  EXPECT_LT(e.param, kTolerance);
  EXPECT_LT(e.exp_avg, kTolerance);
  EXPECT_LT(e.exp_avg_sq, kTolerance);
  // Not vacuous: the parameters moved by far more than the tolerance.
  const FloatState start = initial_state(kElements, 1);
  const FloatState end = run_kernel(2, kElements, kSteps);
  double moved = 0.0;
  for (size_t i = 0; i < start.param.size(); ++i) {
    moved = std::max(moved, std::fabs(static_cast<double>(end.param[i]) - start.param[i]) / std::fabs(start.param[i]));
  }
  EXPECT_GT(moved, 100 * kTolerance);
}

TEST(CpuAdamW, WithoutWeightDecayAndWithAGradScaleTheStepStillAgreesWithDouble) {
  for (const double weight_decay : {0.0, 0.1}) {
    for (const float grad_scale : {1.0f, 1.0f / 1024.0f, 3.0f}) {
      SCOPED_TRACE(testing::Message() << "weight_decay " << weight_decay << ", grad_scale " << grad_scale);
      const Errors e = against_reference(2, kElements, kSteps, weight_decay, grad_scale);
      EXPECT_LT(e.param, kTolerance);
      EXPECT_LT(e.exp_avg, kTolerance);
      EXPECT_LT(e.exp_avg_sq, kTolerance);
    }
  }
}

TEST(CpuAdamW, AZeroGradientOnlyDecaysAndWeightDecayZeroLeavesTheParameterExactlyAlone) {
  const int64_t n = 70'000;
  const std::vector<float> zero(static_cast<size_t>(n), 0.0f);
  CpuAdamW adam(2, kSplitFrom);
  const FloatState start = initial_state(n, 3);
  FloatState no_decay = start;
  kernel_step(adam, no_decay, zero, hyper(1, 0.0));
  EXPECT_TRUE(bit_identical(no_decay.param, start.param));
  FloatState decayed = start;
  kernel_step(adam, decayed, zero, hyper(1, 0.1));
  const auto factor = static_cast<float>(1.0 - 1e-3 * 0.1);
  for (size_t i = 0; i < start.param.size(); ++i) ASSERT_EQ(decayed.param[i], start.param[i] * factor) << i;
  EXPECT_TRUE(bit_identical(decayed.exp_avg, start.exp_avg));
  EXPECT_TRUE(bit_identical(decayed.exp_avg_sq, start.exp_avg_sq));
}

TEST(CpuAdamW, GradScaleMultipliesTheGradientBeforeTheMoments) {
  // A gradient of 1024 scaled by 1/1024 is a gradient of exactly 1: the
  // moments after one step are those of g = 1.
  const int64_t n = 50'000;
  CpuAdamW adam(2, kSplitFrom);
  FloatState scaled = initial_state(n, 4);
  FloatState plain = scaled;
  kernel_step(adam, scaled, std::vector<float>(static_cast<size_t>(n), 1024.0f), hyper(1, 0.01, 1.0f / 1024.0f));
  kernel_step(adam, plain, std::vector<float>(static_cast<size_t>(n), 1.0f), hyper(1, 0.01, 1.0f));
  EXPECT_TRUE(bit_identical(scaled.param, plain.param));
  EXPECT_TRUE(bit_identical(scaled.exp_avg, plain.exp_avg));
  EXPECT_TRUE(bit_identical(scaled.exp_avg_sq, plain.exp_avg_sq));
  EXPECT_FLOAT_EQ(plain.exp_avg[0], 0.1f);
  EXPECT_FLOAT_EQ(plain.exp_avg_sq[0], 0.001f);
}

// ---- Reproducibility: clones and threads ------------------------------------

TEST(CpuAdamW, EveryElementMatchesItsDefinitionInScalarFloatBitForBit) {
  // Whichever clone this CPU runs (avx512f, avx2 or the SSE2 default) must
  // round exactly as the plain loop: no FMA, correctly rounded sqrt and
  // division. Below and above the parallel threshold, with and without
  // weight decay.
  const char* clone = __builtin_cpu_supports("avx512f") ? "avx512f" : __builtin_cpu_supports("avx2") ? "avx2" : "default";
  SCOPED_TRACE(testing::Message() << "the " << clone << " clone");
  for (const int64_t n : {int64_t{1}, int64_t{63}, int64_t{1000}, kElements}) {
    for (const double weight_decay : {0.0, 0.01}) {
      SCOPED_TRACE(testing::Message() << "n " << n << ", weight_decay " << weight_decay);
      CpuAdamW adam(2, kSplitFrom);
      FloatState kernel = initial_state(n, 5);
      FloatState replica = kernel;
      Gradients grads(n, 6);
      for (int t = 1; t <= 5; ++t) {
        const std::vector<float> g = grads.next();
        kernel_step(adam, kernel, g, hyper(t, weight_decay, 0.5f));
        float_replica_step(replica, g, hyper(t, weight_decay, 0.5f));
      }
      EXPECT_TRUE(bit_identical(kernel.param, replica.param));
      EXPECT_TRUE(bit_identical(kernel.exp_avg, replica.exp_avg));
      EXPECT_TRUE(bit_identical(kernel.exp_avg_sq, replica.exp_avg_sq));
    }
  }
}

TEST(CpuAdamW, ResultsAreBitIdenticalOnOneTwoThreeAndSevenThreads) {
  // n is no multiple of 64, so the last chunk is short and ends mid-vector.
  const FloatState one = run_kernel(1, kElements, kSteps);
  for (const int threads : {2, 3, 7}) {
    SCOPED_TRACE(testing::Message() << threads << " threads");
    const FloatState many = run_kernel(threads, kElements, kSteps);
    EXPECT_TRUE(bit_identical(many.param, one.param));
    EXPECT_TRUE(bit_identical(many.exp_avg, one.exp_avg));
    EXPECT_TRUE(bit_identical(many.exp_avg_sq, one.exp_avg_sq));
  }
}

TEST(CpuAdamW, MoreThreadsThanChunksLeavesTheSpareOnesIdleAndStepsEveryElementOnce) {
  // 40,000 elements on 1,024 threads: chunks of 64 (the alignment), 625 of
  // them, so 399 threads find nothing to do. A skipped or doubled element
  // shows against one thread.
  const int64_t n = 40'000;
  const FloatState one = run_kernel(1, n, 3);
  const FloatState many = run_kernel(1024, n, 3);
  EXPECT_TRUE(bit_identical(many.param, one.param));
  EXPECT_TRUE(bit_identical(many.exp_avg, one.exp_avg));
  EXPECT_TRUE(bit_identical(many.exp_avg_sq, one.exp_avg_sq));
}

TEST(CpuAdamW, ThreadsDefaultToTheHardwareAndOneObjectServesManyCalls) {
  CpuAdamW adam;
  EXPECT_EQ(adam.threads(), static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  EXPECT_EQ(adam.min_parallel_elements(), CpuAdamW::kDefaultMinParallelElements);
  // Calls alternating below and above the default threshold on the same pool.
  for (const int64_t n : {int64_t{10}, int64_t{300'000}, int64_t{100}, int64_t{262'144}, int64_t{200'000}, int64_t{0}}) {
    FloatState s = initial_state(n, 7);
    FloatState replica = s;
    const std::vector<float> g = Gradients(n, 8).next();
    kernel_step(adam, s, g, hyper(1));
    float_replica_step(replica, g, hyper(1));
    EXPECT_TRUE(bit_identical(s.param, replica.param)) << "n " << n;
  }
}

// ---- Bad input ---------------------------------------------------------------

TEST(CpuAdamW, BadInputThrowsInvalidArgumentAndWritesNothing) {
  const int64_t n = 1000;
  CpuAdamW adam(2, kSplitFrom);
  FloatState s = initial_state(n, 9);
  const FloatState before = s;
  const std::vector<float> g(static_cast<size_t>(n), 1.0f);
  const auto expect_rejected = [&](int64_t count, const CpuAdamWHyper& h, const char* what) {
    SCOPED_TRACE(what);
    try {
      adam.step(s.param.data(), g.data(), s.exp_avg.data(), s.exp_avg_sq.data(), count, h);
      ADD_FAILURE() << "no exception";
    } catch (const sdk::Error& e) {
      EXPECT_EQ(e.status(), ACCEL_ERROR_INVALID_ARGUMENT);
      EXPECT_NE(std::string(e.what()).find("CpuAdamW"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(bit_identical(s.param, before.param));
    EXPECT_TRUE(bit_identical(s.exp_avg, before.exp_avg));
    EXPECT_TRUE(bit_identical(s.exp_avg_sq, before.exp_avg_sq));
  };
  expect_rejected(-1, hyper(1), "n < 0");
  expect_rejected(n, hyper(0), "step 0");
  expect_rejected(n, hyper(-3), "step < 0");
  CpuAdamWHyper h = hyper(1);
  h.beta1 = 1.0;
  expect_rejected(n, h, "beta1 = 1 (bias correction 0)");
  h = hyper(1);
  h.beta2 = -0.1;
  expect_rejected(n, h, "beta2 < 0");
  h.beta2 = std::numeric_limits<double>::quiet_NaN();
  expect_rejected(n, h, "beta2 NaN");

  EXPECT_THROW(adam.step(nullptr, g.data(), s.exp_avg.data(), s.exp_avg_sq.data(), n, hyper(1)), sdk::Error);
  EXPECT_THROW(CpuAdamW(-1), sdk::Error);
  EXPECT_THROW(CpuAdamW(2, -1), sdk::Error);
  // Nothing to step: null buffers are fine.
  EXPECT_NO_THROW(adam.step(nullptr, nullptr, nullptr, nullptr, 0, hyper(1)));
}

}  // namespace
}  // namespace accel::sharding
