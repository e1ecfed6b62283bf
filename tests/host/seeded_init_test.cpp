// Name-seeded initialisation: slices equal the same slice of the whole.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "host/model/seeded_init.h"

using accel::model::InitKind;
using accel::model::ParamSpec;

namespace {

ParamSpec normal_spec(const std::string& name, int64_t n) {
  return ParamSpec{name, accel::model::ParamRole::linear_weight, accel::model::ParallelHint::column, {n},
                   InitKind::normal, 0.02};
}

TEST(SeededInit, SliceEqualsSliceOfWhole) {
  const ParamSpec spec = normal_spec("h.0.attn.c_attn.weight", 100000);
  std::vector<float> whole(100000), slice(3333);
  accel::model::init_parameter_slice(spec, 7, 0, 100000, whole.data());
  accel::model::init_parameter_slice(spec, 7, 41234, 3333, slice.data());
  for (size_t i = 0; i < slice.size(); ++i) ASSERT_EQ(slice[i], whole[41234 + i]) << i;
}

TEST(SeededInit, DependsOnSeedAndNameAndHasTheRequestedStd) {
  std::vector<float> a(50000), b(50000), c(50000);
  accel::model::init_parameter_slice(normal_spec("x", 50000), 1, 0, 50000, a.data());
  accel::model::init_parameter_slice(normal_spec("x", 50000), 2, 0, 50000, b.data());
  accel::model::init_parameter_slice(normal_spec("y", 50000), 1, 0, 50000, c.data());
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
  double sum = 0, sum_sq = 0;
  for (float v : a) {
    sum += v;
    sum_sq += double(v) * v;
  }
  const double mean = sum / a.size(), std_dev = std::sqrt(sum_sq / a.size() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.001);
  EXPECT_NEAR(std_dev, 0.02, 0.0005);
}

TEST(SeededInit, ZerosAndOnes) {
  std::vector<float> v(10, 5.0f);
  ParamSpec spec = normal_spec("b", 10);
  spec.init = InitKind::zeros;
  accel::model::init_parameter_slice(spec, 1, 0, 10, v.data());
  for (float x : v) EXPECT_EQ(x, 0.0f);
  spec.init = InitKind::ones;
  accel::model::init_parameter_slice(spec, 1, 0, 10, v.data());
  for (float x : v) EXPECT_EQ(x, 1.0f);
}

}  // namespace
