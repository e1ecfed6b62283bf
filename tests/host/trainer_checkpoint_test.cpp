// Trainer checkpoints: round trip, atomic layout, and clear errors for
// damaged or mismatched checkpoints.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "host/checkpoint/safetensors.h"
#include "host/checkpoint/trainer_checkpoint.h"

namespace fs = std::filesystem;
using namespace accel;

namespace {

struct Fixture : ::testing::Test {
  fs::path root = fs::path(::testing::TempDir()) / ("accel_ckpt_" + std::to_string(::getpid()));
  void SetUp() override { fs::remove_all(root); }
  void TearDown() override { fs::remove_all(root); }

  static checkpoint::TrainerState state_for(const model::GptModel& m, int64_t step) {
    checkpoint::TrainerState s;
    s.step = step;
    s.data_position = step * 8;
    s.optimizer_steps = step - 1;  // one skipped step
    s.data_seed = 77;
    s.loss_scale = 512;
    s.model = m.config();
    return s;
  }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const checkpoint::CheckpointError& e) {
    return e.what();
  }
  return "";
}

TEST_F(Fixture, RoundTripRestoresWeightsMomentsAndState) {
  model::GptModel a(model::GptConfig{});
  a.initialise(1);
  train::FlatAdamW opt_a(a.units());
  opt_a.exp_avg()[1].fill_(0.5);
  opt_a.exp_avg_sq()[2].fill_(0.25);
  const fs::path dir = checkpoint::save_trainer_checkpoint(root, a, opt_a, state_for(a, 5));
  EXPECT_EQ(dir, root / "step_5");
  EXPECT_TRUE(fs::exists(dir / "manifest.json"));
  EXPECT_FALSE(fs::exists(root / "step_5.tmp"));

  model::GptModel b(model::GptConfig{});
  b.initialise(2);
  train::FlatAdamW opt_b(b.units());
  const checkpoint::TrainerState s = checkpoint::load_trainer_checkpoint(dir, b, opt_b);
  EXPECT_EQ(s.step, 5);
  EXPECT_EQ(s.data_seed, 77u);
  EXPECT_DOUBLE_EQ(s.loss_scale, 512);
  EXPECT_EQ(opt_b.step_count(), 4);
  for (size_t u = 0; u < a.units().size(); ++u) {
    EXPECT_TRUE(at::equal(a.units()[u].flat_params(), b.units()[u].flat_params()));
    EXPECT_TRUE(at::equal(opt_a.exp_avg()[u], opt_b.exp_avg()[u]));
    EXPECT_TRUE(at::equal(opt_a.exp_avg_sq()[u], opt_b.exp_avg_sq()[u]));
  }
  EXPECT_EQ(checkpoint::resolve_resume_dir(root), dir);
  EXPECT_EQ(checkpoint::resolve_resume_dir(dir), dir);
}

TEST_F(Fixture, ResumePicksTheNewestCompleteAndSkipsDamagedOnes) {
  model::GptModel m(model::GptConfig{});
  train::FlatAdamW opt(m.units());
  checkpoint::save_trainer_checkpoint(root, m, opt, state_for(m, 2));
  const fs::path newest = checkpoint::save_trainer_checkpoint(root, m, opt, state_for(m, 4));
  // Flip one byte of the newest: its manifest no longer verifies.
  {
    std::fstream f(newest / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');
  }
  EXPECT_EQ(checkpoint::resolve_resume_dir(root), root / "step_2");
  EXPECT_NE(error_of([&] { checkpoint::resolve_resume_dir(newest); }).find("damaged"), std::string::npos);
  EXPECT_NE(error_of([&] { checkpoint::resolve_resume_dir(root / "nope"); }).find("not a directory"),
            std::string::npos);
}

TEST_F(Fixture, ModelMismatchIsRejectedBeforeAnythingChanges) {
  model::GptModel small(model::GptConfig{});
  train::FlatAdamW opt(small.units());
  const fs::path dir = checkpoint::save_trainer_checkpoint(root, small, opt, state_for(small, 1));
  model::GptModel other(model::GptConfig{3, 4, 64, 64, 256});
  other.initialise(3);
  const at::Tensor before = other.units()[1].flat_params().clone();
  train::FlatAdamW other_opt(other.units());
  const std::string error = error_of([&] { checkpoint::load_trainer_checkpoint(dir, other, other_opt); });
  EXPECT_NE(error.find("n_layer=2"), std::string::npos) << error;
  EXPECT_TRUE(at::equal(before, other.units()[1].flat_params()));
}

}  // namespace
