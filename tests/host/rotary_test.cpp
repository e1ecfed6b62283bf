// The rotary frequencies of every rope_type (model/rotary.h) against
// transformers 5.23's ROPE_INIT_FUNCTIONS, bit for bit. The expected fp32
// bits were printed by transformers for a LlamaConfig with hidden_size 64,
// 4 heads (head_dim 16), rope_theta 10000 and max_position_embeddings 64:
//   inv, factor = ROPE_INIT_FUNCTIONS[type](config, "cpu", seq_len=...)
// (dynamic's long case with seq_len a tensor, as its forward passes it).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "host/model/rotary.h"

namespace accel::model {
namespace {

std::vector<uint32_t> bits_of(const at::Tensor& t) {
  const at::Tensor c = t.contiguous().to(at::kFloat);
  std::vector<uint32_t> out(static_cast<size_t>(c.numel()));
  std::memcpy(out.data(), c.data_ptr<float>(), out.size() * sizeof(float));
  return out;
}

RopeScaling scaling(RopeScaling::Kind kind, double factor, int64_t original) {
  RopeScaling r;
  r.kind = kind;
  r.factor = factor;
  r.original_max_position = original;
  return r;
}

void expect_frequencies(const RopeScaling& r, int64_t seq_len, const std::vector<uint32_t>& expected,
                        double attention_factor) {
  const RotaryFrequencies f = rotary_frequencies(16, 10000.0, r, seq_len, at::kCPU);
  EXPECT_EQ(bits_of(f.inverse), expected) << to_string(r.kind) << " at " << seq_len;
  EXPECT_EQ(f.attention_factor, attention_factor) << to_string(r.kind);
}

TEST(Rotary, LinearDividesEveryFrequency) {
  expect_frequencies(scaling(RopeScaling::Kind::linear, 4.0, 0), 64,
                     {0x3e800000, 0x3da1e89b, 0x3ccccccd, 0x3c0186e3, 0x3b23d70a, 0x3a4f3e38, 0x3983126f, 0x38a5cb60},
                     1.0);
}

TEST(Rotary, DynamicGrowsItsBaseBeyondTheLength) {
  const RopeScaling r = scaling(RopeScaling::Kind::dynamic, 2.0, 64);
  const std::vector<uint32_t> within = {0x3f800000, 0x3ea1e89b, 0x3dcccccd, 0x3d0186e3,
                                        0x3c23d70a, 0x3b4f3e38, 0x3a83126f, 0x39a5cb60};
  expect_frequencies(r, 64, within, 1.0);
  expect_frequencies(r, 10, within, 1.0);
  expect_frequencies(r, 100,
                     {0x3f800000, 0x3e916142, 0x3da51ea3, 0x3cbb8a2a, 0x3bd50104, 0x3af1ecfe, 0x3a096325, 0x391c0ab4},
                     1.0);
}

TEST(Rotary, YarnRampsAndScalesTheAngles) {
  RopeScaling r = scaling(RopeScaling::Kind::yarn, 4.0, 2048);
  expect_frequencies(r, 64,
                     {0x3f800000, 0x3ea1e89b, 0x3dcccccd, 0x3cd27b30, 0x3bcccccc, 0x3ab55671, 0x3983126f, 0x38a5cb60},
                     1.138629436111989);
  r.mscale = 0.707;
  r.mscale_all_dim = 1.0;
  r.beta_fast = 16.0;
  r.truncate = false;
  expect_frequencies(r, 64,
                     {0x3f800000, 0x3ea1e89b, 0x3dcccccd, 0x3ce43d6b, 0x3bbaa74f, 0x3a56086d, 0x3983126f, 0x38a5cb60},
                     0.964326914892074);
}

TEST(Rotary, LongropeSwitchesFactorsBeyondTheOriginalLength) {
  RopeScaling r = scaling(RopeScaling::Kind::longrope, 4.0, 16);  // factor: 64 / 16, as transformers derives it
  r.short_factor = {1.0, 1.1, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0};
  r.long_factor = {1.0, 2, 3, 4, 5, 6, 7, 8.5};
  expect_frequencies(r, 16,
                     {0x3f800000, 0x3e93308c, 0x3daaaaab, 0x3cacb3d8, 0x3ba3d70a, 0x3aa5cb60, 0x39aec33e, 0x38a5cb60},
                     1.224744871391589);
  expect_frequencies(r, 17,
                     {0x3f800000, 0x3e21e89b, 0x3d088889, 0x3c0186e3, 0x3b03126f, 0x3a0a297b, 0x3915cbec, 0x381c0ab4},
                     1.224744871391589);
  r.attention_factor = 0.5;  // given: taken as it is
  EXPECT_EQ(rotary_frequencies(16, 10000.0, r, 16, at::kCPU).attention_factor, 0.5);
}

TEST(Rotary, Llama3BlendsTheMiddleBand) {
  RopeScaling r = scaling(RopeScaling::Kind::llama3, 8.0, 2048);
  r.low_freq_factor = 1.0;
  r.high_freq_factor = 4.0;
  expect_frequencies(r, 64,
                     {0x3f800000, 0x3ea1e89b, 0x3dcccccd, 0x3d0186e3, 0x3c007422, 0x39de1be8, 0x3903126f, 0x3825cb60},
                     1.0);
}

TEST(Rotary, AnglesAreScaledByTheAttentionFactor) {
  RopeScaling r = scaling(RopeScaling::Kind::yarn, 4.0, 2048);
  const at::Tensor positions = at::arange(0, 5, at::TensorOptions().dtype(at::kFloat));
  const auto [cos, sin] = rotary_angles(positions, 16, 10000.0, r, 5);
  const auto [cos1, sin1] = rotary_angles(positions, 16, 10000.0, RopeScaling{}, 5);
  ASSERT_EQ(cos.sizes(), (at::IntArrayRef{5, 16}));
  EXPECT_FLOAT_EQ(cos[0][0].item<float>(), static_cast<float>(1.138629436111989));
  EXPECT_EQ(cos1[0][0].item<float>(), 1.0f);
}

}  // namespace
}  // namespace accel::model
