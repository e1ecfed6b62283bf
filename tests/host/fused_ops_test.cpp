// The fused operations (host/model/fused_ops.h) on the CPU, through the
// kernels' references (the same argument structs and per-element arithmetic
// the CUDA kernels run): forward values and every input's gradient against
// ATen's unfused composition, what the fused path refuses, and the model's
// wiring (GPT-2 and Llama under FusedKernels::always against off). The
// kernels themselves against these references run where a GPU is present
// (FusedOpsOnAGpu, bench/gpu/run.sh).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <limits>
#include <optional>
#include <vector>

#include "host/comm/cuda_backend.h"
#include "host/model/block_parts.h"
#include "host/model/cross_entropy.h"
#include "host/model/cuda/fused_ops_math.h"
#include "host/model/fused_ops.h"
#include "host/model/gpt.h"
#include "host/model/gpt_config.h"

namespace accel::model {
namespace {

// Before any test asks torch about CUDA (see host/comm/cuda_backend.h).
[[maybe_unused]] const bool cuda_backend_loaded = comm::load_cuda_backend();

// max |a - b| <= tolerance * max(|b|, 1e-6).
void expect_close(const at::Tensor& a, const at::Tensor& b, double tolerance, const char* what) {
  ASSERT_TRUE(a.defined() && b.defined()) << what;
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  const at::Tensor x = a.detach().to(at::kDouble).cpu(), y = b.detach().to(at::kDouble).cpu();
  const double scale = std::max(y.abs().max().item<double>(), 1e-6);
  EXPECT_LE((x - y).abs().max().item<double>(), tolerance * scale) << what;
}

// fp32: a few ulp of the largest entry after a row reduction; 16-bit: one
// rounding step of the stored type.
double tolerance_for(at::ScalarType type) { return type == at::kFloat ? 2e-5 : (type == at::kHalf ? 2e-3 : 1e-2); }

at::Tensor leaf(const at::Tensor& t) { return t.detach().clone().requires_grad_(true); }

std::vector<at::Tensor> grads_of(const at::Tensor& objective, const std::vector<at::Tensor>& inputs) {
  return torch::autograd::grad({objective}, inputs, /*grad_outputs=*/{}, /*retain_graph=*/false,
                               /*create_graph=*/false, /*allow_unused=*/true);
}

// ---- residual add + norm ---------------------------------------------------------

struct NormCase {
  bool centred;                         // LayerNorm, else RMSNorm
  std::optional<at::ScalarType> delta;  // none: the norm of the residual alone
  at::ScalarType output = at::kFloat;
  at::ScalarType stream = at::kFloat;  // the residual's (fsdp's bf16 parameters: bf16)
  at::ScalarType weight = at::kFloat;
};

void check_add_norm(const NormCase& c) {
  SCOPED_TRACE(testing::Message() << (c.centred ? "LayerNorm" : "RMSNorm") << " stream " << c10::toString(c.stream)
                                  << " weight " << c10::toString(c.weight) << " delta "
                                  << (c.delta ? c10::toString(*c.delta) : "none") << " output "
                                  << c10::toString(c.output));
  at::manual_seed(11);
  const int64_t C = 48;
  const at::Tensor residual0 = (at::randn({5, 3, C}) * 2 + 0.5).to(c.stream);
  const at::Tensor delta0 = c.delta ? at::randn({5, 3, C}).to(*c.delta) : at::Tensor();
  const at::Tensor weight0 = at::randn({C}).to(c.weight);
  const at::Tensor bias0 = c.centred ? at::randn({C}).to(c.weight) : at::Tensor();
  const at::Tensor up_normed = at::randn({5, 3, C}), up_sum = at::randn({5, 3, C});

  auto inputs = [&] {
    std::vector<at::Tensor> in = {leaf(residual0), c.delta ? leaf(delta0) : at::Tensor(), leaf(weight0),
                                  c.centred ? leaf(bias0) : at::Tensor()};
    return in;
  };
  auto differentiable = [](const std::vector<at::Tensor>& in) {
    std::vector<at::Tensor> out;
    for (const at::Tensor& t : in) {
      if (t.defined()) out.push_back(t);
    }
    return out;
  };

  const std::vector<at::Tensor> f = inputs();
  const fused::AddNorm fused_out = fused::add_norm(f[0], f[1], f[2], f[3], 1e-5, c.centred, c.output);
  ASSERT_EQ(fused_out.normed.scalar_type(), c.output);
  ASSERT_EQ(fused_out.sum.defined(), c.delta.has_value());

  const std::vector<at::Tensor> r = inputs();
  const at::Tensor ref_sum = c.delta ? r[0] + r[1] : r[0];
  const at::Tensor ref_normed =
      (c.centred ? at::layer_norm(ref_sum, {C}, r[2], r[3], 1e-5) : rms_norm(ref_sum, r[2], 1e-5)).to(c.output);

  if (c.delta) {
    EXPECT_TRUE(at::equal(fused_out.sum, ref_sum)) << "the sum is one fp32 add either way";
  }
  expect_close(fused_out.normed, ref_normed, tolerance_for(c.output), "normed");

  // The sum has another use (the residual stream): both outputs carry a gradient.
  auto objective = [&](const at::Tensor& sum, const at::Tensor& normed) {
    at::Tensor o = (normed.to(at::kFloat) * up_normed).sum();
    if (c.delta) o = o + (sum.to(at::kFloat) * up_sum).sum();
    return o;
  };
  const auto fused_grads = grads_of(objective(fused_out.sum, fused_out.normed), differentiable(f));
  const auto ref_grads = grads_of(objective(ref_sum, ref_normed), differentiable(r));
  ASSERT_EQ(fused_grads.size(), ref_grads.size());
  const char* names[] = {"residual", "delta", "weight", "bias"};
  size_t k = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    if (!f[i].defined()) continue;
    ASSERT_EQ(fused_grads[k].scalar_type(), f[i].scalar_type()) << names[i];
    // A 16-bit output's gradient arrives rounded, as autograd's would.
    const double tol = std::max({tolerance_for(c.output), tolerance_for(f[i].scalar_type()),
                                 tolerance_for(c.stream)});
    expect_close(fused_grads[k], ref_grads[k], tol, names[i]);
    ++k;
  }
}

TEST(FusedAddNorm, LayerNormAfterTheResidualAddIsAtensComposition) {
  for (const std::optional<at::ScalarType> delta :
       {std::optional<at::ScalarType>{}, std::optional{at::kFloat}, std::optional{at::kBFloat16},
        std::optional{at::kHalf}}) {
    check_add_norm({/*centred=*/true, delta});
  }
}

TEST(FusedAddNorm, RmsNormIsTransformersLlamaRmsNorm) {
  for (const std::optional<at::ScalarType> delta :
       {std::optional<at::ScalarType>{}, std::optional{at::kFloat}, std::optional{at::kBFloat16}}) {
    check_add_norm({/*centred=*/false, delta});
  }
}

TEST(FusedAddNorm, RoundsOnceToTheAutocastType) {
  check_add_norm({/*centred=*/true, at::kBFloat16, /*output=*/at::kBFloat16});
  check_add_norm({/*centred=*/false, at::kFloat, /*output=*/at::kHalf});
}

// fsdp with bf16 parameters: the residual stream, the weights and the
// branch all bf16; the sum rounded as ATen's add rounds it.
TEST(FusedAddNorm, TakesABf16StreamAndWeights) {
  for (const bool centred : {true, false}) {
    check_add_norm({centred, at::kBFloat16, at::kBFloat16, /*stream=*/at::kBFloat16, /*weight=*/at::kBFloat16});
    check_add_norm({centred, std::nullopt, at::kBFloat16, /*stream=*/at::kBFloat16, /*weight=*/at::kFloat});
  }
}

// A 16-bit stream's sum is rounded before the statistics see it, as the
// norm of ATen's (rounded) sum: in fp32 output, to fp32's precision.
TEST(FusedAddNorm, NormalisesTheRoundedSum) {
  at::manual_seed(16);
  const at::Tensor x = (at::randn({4, 64}) * 3).to(at::kBFloat16), d = at::randn({4, 64}).to(at::kBFloat16);
  const at::Tensor w = at::randn({64}), b = at::randn({64});
  const fused::AddNorm out = fused::add_norm(x, d, w, b, 1e-5, /*centred=*/true, at::kFloat);
  const at::Tensor sum = x + d;
  EXPECT_TRUE(at::equal(out.sum, sum));
  expect_close(out.normed, at::layer_norm(sum.to(at::kFloat), {64}, w, b, 1e-5), 2e-5, "normed");
}

TEST(FusedAddNorm, RefusesWhatTheKernelsDoNotTake) {
  const at::Tensor x = at::randn({2, 8}), w = at::ones({8});
  EXPECT_TRUE(fused::add_norm_supported(x, at::Tensor(), w, at::Tensor()));
  const at::Tensor x16 = x.to(at::kBFloat16);
  EXPECT_TRUE(fused::add_norm_supported(x16, x16, w, at::Tensor()));
  EXPECT_TRUE(fused::add_norm_supported(x16, x16, w.to(at::kBFloat16), at::Tensor()));
  EXPECT_FALSE(fused::add_norm_supported(x16, x, w, at::Tensor()));  // the sum would be fp32
  EXPECT_FALSE(fused::add_norm_supported(x16, at::Tensor(), w.to(at::kHalf), at::Tensor()));
  EXPECT_FALSE(fused::add_norm_supported(x.to(at::kDouble), at::Tensor(), w, at::Tensor()));
  EXPECT_FALSE(fused::add_norm_supported(x, at::Tensor(), at::ones({7}), at::Tensor()));
  EXPECT_FALSE(fused::add_norm_supported(x, at::randn({2, 7}), w, at::Tensor()));
  EXPECT_FALSE(fused::add_norm_supported(x, x.to(at::kInt), w, at::Tensor()));
  EXPECT_FALSE(fused::add_norm_supported(x, at::Tensor(), w, at::ones({8}, at::kDouble)));
  EXPECT_FALSE(fused::add_norm_supported(at::randn({1, 8193}), at::Tensor(), at::ones({8193}), at::Tensor()));
  EXPECT_TRUE(fused::add_norm_supported(at::randn({1, 8192}), at::Tensor(), at::ones({8192}), at::Tensor()));
  EXPECT_THROW(fused::add_norm(x, at::Tensor(), at::ones({7}), at::Tensor(), 1e-5, true, at::kFloat),
               std::invalid_argument);
  EXPECT_THROW(fused::add_norm(x, at::Tensor(), w, at::Tensor(), 1e-5, true, at::kInt), std::invalid_argument);
}

// ---- SwiGLU ----------------------------------------------------------------------

TEST(FusedSwiglu, IsSiluOfTheGateTimesUp) {
  for (const at::ScalarType type : {at::kFloat, at::kBFloat16, at::kHalf}) {
    SCOPED_TRACE(c10::toString(type));
    at::manual_seed(12);
    const at::Tensor gate0 = (at::randn({4, 3, 40}) * 3).to(type), up0 = at::randn({4, 3, 40}).to(type);
    const at::Tensor upstream = at::randn({4, 3, 40}).to(type);
    const at::Tensor g1 = leaf(gate0), u1 = leaf(up0), g2 = leaf(gate0), u2 = leaf(up0);
    const at::Tensor fused_out = fused::swiglu(g1, u1), ref = at::silu(g2) * u2;
    ASSERT_EQ(fused_out.scalar_type(), type);
    // ATen rounds silu, then the product: two roundings to the fused path's one.
    expect_close(fused_out, ref, 2 * tolerance_for(type), "swiglu");
    const auto a = grads_of((fused_out * upstream).to(at::kFloat).sum(), {g1, u1});
    const auto b = grads_of((ref * upstream).to(at::kFloat).sum(), {g2, u2});
    expect_close(a[0], b[0], 2 * tolerance_for(type), "d gate");
    expect_close(a[1], b[1], 2 * tolerance_for(type), "d up");
  }
  EXPECT_FALSE(fused::swiglu_supported(at::randn({2, 4}), at::randn({2, 4}).t().contiguous().t()));
  EXPECT_FALSE(fused::swiglu_supported(at::randn({2, 4}), at::randn({2, 4}).to(at::kBFloat16)));
}

// ---- rotary ----------------------------------------------------------------------

at::Tensor rotate_half(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

TEST(FusedRotary, IsTheRotateHalfFormAtEachPosition) {
  const int64_t T = 6, B = 2, H = 3, D = 8;
  at::manual_seed(13);
  // Angles as the model lays them out: [T, D], the two halves equal.
  const at::Tensor freqs = at::outer(at::arange(T, at::kFloat) + 3, at::rand({D / 2}));
  const at::Tensor angles = at::cat({freqs, freqs}, -1);
  const at::Tensor cos = angles.cos(), sin = angles.sin();
  for (const at::ScalarType type : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(type));
    const at::Tensor x0 = at::randn({T, B, H, D}).to(type);  // [T, B, heads, D], as the linear gives it
    const at::Tensor upstream = at::randn({B, H, T, D});
    const at::Tensor x1 = leaf(x0), x2 = leaf(x0);
    const at::Tensor fused_out = fused::rotary(x1, cos, sin).permute({1, 2, 0, 3});
    const at::Tensor xp = x2.permute({1, 2, 0, 3});
    const at::Tensor ref = xp * cos.to(type) + rotate_half(xp) * sin.to(type);
    expect_close(fused_out, ref, 2 * tolerance_for(type), "rotated");
    const auto a = grads_of((fused_out.to(at::kFloat) * upstream).sum(), {x1});
    const auto b = grads_of((ref.to(at::kFloat) * upstream).sum(), {x2});
    expect_close(a[0], b[0], 2 * tolerance_for(type), "d x");
  }
  EXPECT_FALSE(fused::rotary_supported(at::randn({T, B, H, 7}), at::randn({T, 7}), at::randn({T, 7})));
  EXPECT_FALSE(fused::rotary_supported(at::randn({T, B, H, D}), at::randn({T + 1, D}), at::randn({T + 1, D})));
}

// ---- cross-entropy ---------------------------------------------------------------------

TEST(FusedCrossEntropy, IsTheUnfusedLossAndGradient) {
  at::manual_seed(14);
  for (const at::ScalarType type : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(type));
    // [T, B, V] narrowed from a padded head's 64 columns to 61.
    const at::Tensor padded = (at::randn({7, 3, 64}) * 4).to(type);
    const at::Tensor logits = padded.narrow(-1, 0, 61);
    const at::Tensor labels = at::randint(61, {3, 7}).t();
    const LossAndGrad a = fused::cross_entropy_with_grad(logits, labels, 0.37);
    const LossAndGrad b = cross_entropy_with_grad(logits, labels, 0.37);
    expect_close(a.loss, b.loss, 1e-6, "loss");
    ASSERT_EQ(a.grad.scalar_type(), type);
    ASSERT_EQ(a.grad.sizes(), logits.sizes());
    expect_close(a.grad, b.grad, tolerance_for(type), "grad");
  }
  // A label outside the vocabulary is a NaN loss, never a read past the row.
  const at::Tensor logits = at::randn({2, 5});
  const LossAndGrad bad = fused::cross_entropy_with_grad(logits, at::tensor({1, 5}, at::kLong), 1.0);
  EXPECT_TRUE(std::isnan(bad.loss.item<float>()));
  EXPECT_FALSE(fused::cross_entropy_supported(logits, at::tensor({1, 2, 3}, at::kLong)));
}

// Issue 50 (21): two -inf logits before a finite one made the one-pass
// normaliser exp(-inf - -inf) = NaN, where ATen's loss is finite (a masked
// vocabulary writes -inf logits).
TEST(FusedCrossEntropy, MinusInfinityLogitsBeforeAFiniteOneAreLeftOut) {
  const float inf = std::numeric_limits<float>::infinity();
  const at::Tensor logits = at::tensor({-inf, -inf, 1.0f, 2.0f, -inf, 0.5f,    // -inf first, twice
                                        0.25f, -inf, -inf, -inf, 3.0f, -1.0f},  // -inf after a finite one
                                       at::kFloat)
                                .reshape({2, 6});
  const at::Tensor labels = at::tensor({3, 0}, at::kLong);
  const LossAndGrad a = fused::cross_entropy_with_grad(logits, labels, 0.5);
  const LossAndGrad b = cross_entropy_with_grad(logits, labels, 0.5);
  ASSERT_TRUE(std::isfinite(b.loss.item<float>()));
  expect_close(a.loss, b.loss, 1e-6, "loss");
  expect_close(a.grad, b.grad, tolerance_for(at::kFloat), "grad");

  // The kernel's block reduction merges partial sums in any order: two
  // all -inf parts, then a finite one, in either order, to the bit.
  namespace math = runtime::cuda_math;
  const math::SoftmaxRunning masked{-inf, 2.0f}, finite{2.0f, 1.5f};
  const math::SoftmaxRunning both = math::softmax_merge(masked, masked);
  EXPECT_EQ(both.max, -inf);
  EXPECT_EQ(both.sum, 4.0f);
  for (const math::SoftmaxRunning r : {math::softmax_merge(both, finite), math::softmax_merge(finite, both)}) {
    EXPECT_EQ(r.max, 2.0f);
    EXPECT_EQ(r.sum, 1.5f);
  }
}

// ---- the model's wiring ------------------------------------------------------------------

// The loss and every parameter's gradient, with the fused path taken or not.
struct Run {
  double loss;
  std::vector<at::Tensor> grads;
};

Run train_step(const GptConfig& config, GptModel::FusedKernels mode, bool with_logit_grad) {
  GptModel model(config);
  model.initialise(21);
  model.set_fused_kernels(mode);
  at::manual_seed(22);
  const at::Tensor tokens = at::randint(0, config.vocab_size, {2, config.seq_len}, at::kLong);
  const at::Tensor targets = at::randint(0, config.vocab_size, {2, config.seq_len}, at::kLong);
  at::Tensor loss;
  if (with_logit_grad) {
    at::Tensor x = tokens;
    for (size_t i = 0; i < model.units().size(); ++i) x = model.forward_unit(i, x);
    const std::optional<LossAndGrad> lg = model.loss_and_logit_grad(x, targets, 1.0);
    EXPECT_EQ(lg.has_value(), mode == GptModel::FusedKernels::always);  // CPU logits: only the forced path
    if (!lg) return {};
    x.backward(lg->grad);
    loss = lg->loss;
  } else {
    loss = model.loss(tokens, targets);
    loss.backward();
  }
  Run run{loss.item<double>(), {}};
  for (const Unit& unit : model.units()) run.grads.push_back(unit.flat_grads().clone());
  return run;
}

void expect_same_training(const GptConfig& config, bool with_logit_grad) {
  const Run unfused = train_step(config, GptModel::FusedKernels::off, /*with_logit_grad=*/false);
  const Run fused_run = train_step(config, GptModel::FusedKernels::always, with_logit_grad);
  EXPECT_NEAR(fused_run.loss, unfused.loss, 1e-5);
  ASSERT_EQ(fused_run.grads.size(), unfused.grads.size());
  for (size_t i = 0; i < unfused.grads.size(); ++i) {
    expect_close(fused_run.grads[i], unfused.grads[i], 1e-4, ("unit " + std::to_string(i)).c_str());
  }
}

TEST(FusedModel, GptTrainsAsTheUnfusedPath) {
  expect_same_training(make_gpt_config("gpt-tiny", {}), /*with_logit_grad=*/false);
  expect_same_training(make_gpt_config("gpt-tiny", {}), /*with_logit_grad=*/true);
}

TEST(FusedModel, LlamaTrainsAsTheUnfusedPath) {
  expect_same_training(make_gpt_config("llama-tiny", {}), /*with_logit_grad=*/false);
  expect_same_training(make_gpt_config("llama-tiny", {}), /*with_logit_grad=*/true);
}

TEST(FusedModel, TheCpuKeepsAtensCompositionUnlessForced) {
  EXPECT_FALSE(fused::fused_kernels_serve(at::Device(at::kCPU), true));
  EXPECT_FALSE(fused::fused_kernels_serve(at::Device(at::kCUDA, 0), false));
  if (!at::hasCUDA()) {
    EXPECT_FALSE(fused::fused_kernels_serve(at::Device(at::kCUDA, 0), true));
  }
}

// ---- the CUDA kernels against the references (where a GPU is present) ----------------------

TEST(FusedOpsOnAGpu, TheKernelsGiveTheReferencesValues) {
  if (!fused::kernels_built() || !at::hasCUDA()) GTEST_SKIP() << "no CUDA device, or a build without the kernels";
  at::manual_seed(15);
  const at::Device gpu(at::kCUDA, 0);
  // A wide row (several elements a thread), a narrow one, and 16-bit types.
  for (const int64_t C : {8, 768, 5000}) {
    SCOPED_TRACE(testing::Message() << "C " << C);
    const at::Tensor x = at::randn({33, C}), d = at::randn({33, C}).to(at::kBFloat16);
    const at::Tensor w = at::randn({C}), b = at::randn({C}), up = at::randn({33, C}).to(at::kBFloat16);
    for (const bool centred : {true, false}) {
      const at::Tensor bias = centred ? b : at::Tensor();
      const at::Tensor xc = leaf(x), dc = leaf(d), wc = leaf(w), xg = leaf(x.to(gpu)), dg = leaf(d.to(gpu));
      const at::Tensor wg = leaf(w.to(gpu));
      const auto cpu = fused::add_norm(xc, dc, wc, bias, 1e-5, centred, at::kBFloat16);
      const auto gpu_out = fused::add_norm(xg, dg, wg, centred ? bias.to(gpu) : at::Tensor(), 1e-5, centred,
                                           at::kBFloat16);
      expect_close(gpu_out.sum, cpu.sum, 1e-6, "sum");
      expect_close(gpu_out.normed, cpu.normed, 1e-2, "normed");
      const auto gc = grads_of((cpu.normed.to(at::kFloat) * up.to(at::kFloat)).sum() + cpu.sum.sum(), {xc, dc, wc});
      const auto gg = grads_of((gpu_out.normed.to(at::kFloat) * up.to(gpu).to(at::kFloat)).sum() + gpu_out.sum.sum(),
                               {xg, dg, wg});
      for (size_t i = 0; i < gc.size(); ++i) expect_close(gg[i], gc[i], 2e-2, "norm grads");
    }
  }
  {  // fsdp's bf16 stream and weights
    const at::Tensor x = at::randn({65, 768}).to(at::kBFloat16), d = at::randn({65, 768}).to(at::kBFloat16);
    const at::Tensor w = at::randn({768}).to(at::kBFloat16);
    const auto cpu = fused::add_norm(x, d, w, at::Tensor(), 1e-5, /*centred=*/false, at::kBFloat16);
    const auto gpu_out = fused::add_norm(x.to(gpu), d.to(gpu), w.to(gpu), at::Tensor(), 1e-5, false, at::kBFloat16);
    expect_close(gpu_out.sum, cpu.sum, 1e-6, "bf16 sum");
    expect_close(gpu_out.normed, cpu.normed, 1e-2, "bf16 normed");
  }
  const at::Tensor gate = at::randn({1000, 96}).to(at::kBFloat16), up = at::randn({1000, 96}).to(at::kBFloat16);
  expect_close(fused::swiglu(gate.to(gpu), up.to(gpu)), fused::swiglu(gate, up), 1e-2, "swiglu");
  const at::Tensor q = at::randn({10, 2, 4, 16}).to(at::kBFloat16);
  const at::Tensor angles = at::rand({10, 16}) * 10;
  expect_close(fused::rotary(q.to(gpu), angles.cos().to(gpu), angles.sin().to(gpu)),
               fused::rotary(q, angles.cos(), angles.sin()), 1e-2, "rotary");
  const at::Tensor logits = (at::randn({300, 50257}) * 3).to(at::kBFloat16);
  const at::Tensor labels = at::randint(50257, {300});
  const LossAndGrad a = fused::cross_entropy_with_grad(logits.to(gpu), labels.to(gpu), 1.0);
  const LossAndGrad b = fused::cross_entropy_with_grad(logits, labels, 1.0);
  expect_close(a.loss, b.loss, 1e-5, "loss");
  expect_close(a.grad, b.grad, 1e-2, "loss grad");
}

}  // namespace
}  // namespace accel::model
