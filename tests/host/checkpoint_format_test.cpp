// Trainer checkpoints: round trip, atomic layout, and clear errors for
// damaged or mismatched checkpoints; cross-strategy resume through the one
// CheckpointReader (parameters saved only as a sharding plugin's slices
// restore a plain run, and a plain checkpoint serves a sharding plugin);
// units a plugin manages and optimizer state a plugin owns are neither
// saved nor restored by the host; the commit-time tiling check.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "host/checkpoint/atomic_dir.h"
#include "host/checkpoint/safetensors.h"
#include "host/train/checkpoint_format.h"
#include "host/runtime/checkpoint_reader.h"
#include "host/runtime/plugin_state.h"
#include "host/runtime/tensor_views.h"

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

// What a sharding plugin puts for a parameter on `rank` of `ranks`: its
// rows split evenly (dimension 0), as whole rows.
void put_row_shard(runtime::PluginStateWriter& w, AccelCheckpointSpace space, const std::string& name,
                   const at::Tensor& whole, int rank, int ranks) {
  const int64_t rows = whole.dim() == 0 ? 1 : whole.size(0);
  const int64_t per = (rows + ranks - 1) / ranks;
  const int64_t begin = std::min<int64_t>(rows, per * rank);
  const int64_t count = std::min<int64_t>(rows, begin + per) - begin;
  if (count == 0) return;
  std::vector<int64_t> offset(static_cast<size_t>(whole.dim()), 0);
  if (!offset.empty()) offset[0] = begin;
  const at::Tensor part = whole.dim() == 0 ? whole : whole.narrow(0, begin, count).contiguous();
  runtime::TensorView view(part);
  w.put("fsdp", space, name, std::vector<int64_t>(whole.sizes().begin(), whole.sizes().end()), offset, view.get());
}

TEST_F(Fixture, ParametersSavedOnlyAsShardsResumeAPlainRun) {
  model::GptModel a(model::GptConfig{});
  a.initialise(1);
  train::FlatAdamW opt_a(a.units());
  opt_a.exp_avg()[1].normal_();
  opt_a.exp_avg_sq()[2].uniform_();
  // The sharding run: the host keeps no unit, two ranks each put their rows
  // of every parameter and moment into their own plugin-state file.
  model::GptModel sharded(model::GptConfig{}, at::kCPU, /*allocate=*/false);
  train::FlatAdamW none;
  const fs::path dir = root / "step_5";
  fs::create_directories(dir);
  checkpoint::TrainerState state = state_for(a, 5);
  state.world_size = 2;
  const auto files = checkpoint::write_host_files(dir, sharded, none, state, /*host_optimizer=*/false);
  EXPECT_EQ(files, std::vector<std::string>{"trainer_state.json"});
  for (int rank = 0; rank < 2; ++rank) {
    runtime::PluginStateWriter w;
    for (size_t u = 0; u < a.units().size(); ++u) {
      for (const model::Param& p : a.units()[u].params()) {
        const auto view_of = [&](const at::Tensor& flat) {
          return flat.narrow(0, p.offset, p.spec.numel()).view(p.spec.shape);
        };
        put_row_shard(w, ACCEL_CHECKPOINT_MODEL, p.spec.name, view_of(a.units()[u].flat_params()), rank, 2);
        put_row_shard(w, ACCEL_CHECKPOINT_OPTIMIZER, "exp_avg/" + p.spec.name, view_of(opt_a.exp_avg()[u]), rank, 2);
        put_row_shard(w, ACCEL_CHECKPOINT_OPTIMIZER, "exp_avg_sq/" + p.spec.name, view_of(opt_a.exp_avg_sq()[u]),
                      rank, 2);
      }
    }
    w.write(dir / runtime::plugin_state_file_name(rank));
  }

  model::GptModel b(model::GptConfig{});
  b.initialise(2);
  train::FlatAdamW opt_b(b.units());
  const checkpoint::TrainerState s = checkpoint::load_trainer_checkpoint(dir, b, opt_b);
  EXPECT_EQ(s.world_size, 2);
  EXPECT_EQ(opt_b.step_count(), 4);
  for (size_t u = 0; u < a.units().size(); ++u) {
    EXPECT_TRUE(at::equal(a.units()[u].flat_params(), b.units()[u].flat_params())) << u;
    EXPECT_TRUE(at::equal(opt_a.exp_avg()[u], opt_b.exp_avg()[u])) << u;
    EXPECT_TRUE(at::equal(opt_a.exp_avg_sq()[u], opt_b.exp_avg_sq()[u])) << u;
  }
}

TEST_F(Fixture, APlainCheckpointServesAShardingPluginsRows) {
  model::GptModel a(model::GptConfig{});
  a.initialise(1);
  train::FlatAdamW opt(a.units());
  opt.exp_avg()[1].fill_(0.5);
  const fs::path dir = checkpoint::save_trainer_checkpoint(root, a, opt, state_for(a, 3));
  const runtime::CheckpointReader reader = runtime::CheckpointReader::open_directory(dir);
  const model::Param& p = a.units()[1].params().front();
  const at::Tensor whole = a.units()[1].flat_params().narrow(0, p.offset, p.spec.numel()).view(p.spec.shape);
  std::vector<int64_t> offset(p.spec.shape.size(), 0);
  offset[0] = 1;
  std::vector<int64_t> rows = p.spec.shape;
  rows[0] = 2;
  at::Tensor shard = at::zeros(rows);
  reader.read("", ACCEL_CHECKPOINT_MODEL, p.spec.name, p.spec.shape, offset, shard);
  EXPECT_TRUE(at::equal(shard, whole.narrow(0, 1, 2)));
  reader.read("", ACCEL_CHECKPOINT_OPTIMIZER, "exp_avg/" + p.spec.name, p.spec.shape, offset, shard);
  EXPECT_TRUE(at::equal(shard, at::full(rows, 0.5)));
}

TEST_F(Fixture, UnitsAPluginManagesAreNeitherSavedNorRestored) {
  model::GptModel a(model::GptConfig{});
  a.initialise(1);
  a.units()[1].release_params();
  train::FlatAdamW opt(a.units());
  const fs::path dir = checkpoint::save_trainer_checkpoint(root, a, opt, state_for(a, 2));
  const checkpoint::SafetensorsFile weights = checkpoint::SafetensorsFile::open(dir / "model.safetensors");
  for (const model::Param& p : a.units()[1].params()) EXPECT_EQ(weights.find(p.spec.name), nullptr) << p.spec.name;
  EXPECT_NE(weights.find(a.units()[0].params().front().spec.name), nullptr);

  // A run whose plugin manages the same unit resumes; a plain run, which
  // needs unit 1's parameters from somewhere, is told which one is missing.
  model::GptModel b(model::GptConfig{});
  b.units()[1].release_params();
  train::FlatAdamW opt_b(b.units());
  checkpoint::load_trainer_checkpoint(dir, b, opt_b);
  EXPECT_TRUE(at::equal(a.units()[2].flat_params(), b.units()[2].flat_params()));
  model::GptModel plain(model::GptConfig{});
  train::FlatAdamW opt_plain(plain.units());
  const std::string error = error_of([&] { checkpoint::load_trainer_checkpoint(dir, plain, opt_plain); });
  EXPECT_NE(error.find("no tensor '" + a.units()[1].params().front().spec.name + "'"), std::string::npos) << error;
}

TEST_F(Fixture, OptimizerStateIsTheHostsOnlyWhenItRanTheStep) {
  model::GptModel a(model::GptConfig{});
  a.initialise(1);
  train::FlatAdamW opt(a.units());
  const fs::path dir = checkpoint::save_checkpoint_from_all_ranks(root, checkpoint::RankGroup{}, a, opt,
                                                                  state_for(a, 4), /*host_optimizer=*/false);
  EXPECT_TRUE(fs::exists(dir / "model.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "optimizer.safetensors"));

  model::GptModel b(model::GptConfig{});
  b.initialise(2);
  train::FlatAdamW opt_b(b.units());
  const at::Tensor before = b.units()[0].flat_params().clone();
  // A run whose host steps AdamW needs the moments: refused, nothing changed.
  const std::string error = error_of([&] { checkpoint::load_trainer_checkpoint(dir, b, opt_b, true); });
  EXPECT_NE(error.find("optimizer state: no tensor 'exp_avg/"), std::string::npos) << error;
  EXPECT_TRUE(at::equal(before, b.units()[0].flat_params()));
  // One whose plugin steps it restores the parameters and the step count.
  checkpoint::load_trainer_checkpoint(dir, b, opt_b, false);
  EXPECT_TRUE(at::equal(a.units()[0].flat_params(), b.units()[0].flat_params()));
  EXPECT_EQ(opt_b.step_count(), 3);
}

TEST_F(Fixture, WorldSizeIsRecordedAndDefaultsToOne) {
  model::GptModel m(model::GptConfig{});
  train::FlatAdamW opt(m.units());
  checkpoint::TrainerState state = state_for(m, 1);
  state.world_size = 4;
  const fs::path dir = checkpoint::save_trainer_checkpoint(root, m, opt, state);
  EXPECT_EQ(checkpoint::read_trainer_state(dir).world_size, 4);
  // A trainer_state.json from before the field.
  std::ifstream in(dir / "trainer_state.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = text.find(",\n  \"world_size\"");
  ASSERT_NE(at, std::string::npos) << text;
  text.erase(at, text.find('\n', at + 2) - at);
  std::ofstream(dir / "trainer_state.json") << text;
  EXPECT_EQ(checkpoint::read_trainer_state(dir).world_size, 1);
}

TEST_F(Fixture, SlicesThatDoNotTileATensorFailTheSave) {
  model::GptModel m(model::GptConfig{});
  m.initialise(1);
  train::FlatAdamW opt(m.units());
  const model::Param& p = m.units()[0].params().front();
  const at::Tensor value = m.units()[0].flat_params().narrow(0, p.offset, p.spec.numel()).view(p.spec.shape);
  // A plugin that puts half of its state...
  std::string error = error_of([&] {
    checkpoint::save_checkpoint_from_all_ranks(root, checkpoint::RankGroup{}, m, opt, state_for(m, 1), true,
                                               [&](runtime::PluginStateWriter& w) {
                                                 put_row_shard(w, ACCEL_CHECKPOINT_PLUGIN, "master", value, 0, 2);
                                               });
  });
  EXPECT_NE(error.find("'fsdp/master': the slices saved by all ranks cover"), std::string::npos) << error;
  // ...or a parameter the host saved too (both would be read back).
  error = error_of([&] {
    checkpoint::save_checkpoint_from_all_ranks(root, checkpoint::RankGroup{}, m, opt, state_for(m, 1), true,
                                               [&](runtime::PluginStateWriter& w) {
                                                 put_row_shard(w, ACCEL_CHECKPOINT_MODEL, p.spec.name, value, 0, 1);
                                               });
  });
  EXPECT_NE(error.find("'@model/" + p.spec.name + "'"), std::string::npos) << error;
  EXPECT_NE(error.find("overlaps"), std::string::npos) << error;
  EXPECT_EQ(checkpoint::find_newest_complete(root), std::nullopt);
  EXPECT_FALSE(fs::exists(root / "step_1.tmp"));
}

// --save-async's snapshot: what the save holds is the state when it was
// prepared, whatever training does to the live tensors before the write, and
// the files are the blocking save's bytes.
TEST_F(Fixture, ASnapshotSavesTheStateItWasTakenFromAndTheSameBytes) {
  model::GptModel m(model::GptConfig{});
  m.initialise(1);
  train::FlatAdamW opt(m.units());
  opt.exp_avg()[1].fill_(0.5);
  const checkpoint::TrainerState state = state_for(m, 3);
  const fs::path blocking = checkpoint::save_trainer_checkpoint(root / "blocking", m, opt, state);

  checkpoint::PreparedSave snapshot(root / "async", checkpoint::RankGroup{}, m, opt, state, true, {}, {},
                                    /*snapshot=*/true);
  // The weights and both moments of every unit, copied.
  int64_t flat_bytes = 0;
  for (const model::Unit& unit : m.units()) flat_bytes += static_cast<int64_t>(unit.flat_params().nbytes());
  EXPECT_EQ(snapshot.host_bytes(), 3 * flat_bytes);
  EXPECT_TRUE(fs::exists(root / "async" / "step_3.tmp"));  // the commit has begun
  // Training goes on before the write.
  at::NoGradGuard no_grad;
  for (model::Unit& unit : m.units()) unit.flat_params().add_(1.0f);
  opt.exp_avg()[1].fill_(-7.0f);
  std::thread writer([&] { snapshot.write(); });
  writer.join();
  EXPECT_FALSE(fs::exists(root / "async" / "step_3"));  // not before finish
  const fs::path async = snapshot.finish();
  EXPECT_EQ(async, root / "async" / "step_3");
  EXPECT_EQ(checkpoint::read_manifest(async).files, checkpoint::read_manifest(blocking).files);

  // A blocking save of the live tensors copies nothing on the CPU.
  checkpoint::PreparedSave live(root / "live", checkpoint::RankGroup{}, m, opt, state, true, {}, {},
                                /*snapshot=*/false);
  EXPECT_EQ(live.host_bytes(), 0);
}

// Saves that recycle the previous one's copies (--save-async from the second
// save on) hold each step's state, not a stale or a live one.
TEST_F(Fixture, RecycledSnapshotsHoldTheirOwnStepsState) {
  model::GptModel m(model::GptConfig{});
  m.initialise(1);
  train::FlatAdamW opt(m.units());
  const model::Param& p = m.units()[0].params().front();
  const at::Tensor first = m.units()[0].flat_params().narrow(0, p.offset, p.spec.numel()).view(p.spec.shape);
  const auto plugin_puts = [&](runtime::PluginStateWriter& w) {
    put_row_shard(w, ACCEL_CHECKPOINT_PLUGIN, "master", first, 0, 1);
  };
  std::unique_ptr<checkpoint::PreparedSave> spent;
  at::NoGradGuard no_grad;
  for (int64_t step = 1; step <= 3; ++step) {
    const fs::path blocking = checkpoint::save_checkpoint_from_all_ranks(
        root / "blocking", checkpoint::RankGroup{}, m, opt, state_for(m, step), true, plugin_puts);
    auto save = std::make_unique<checkpoint::PreparedSave>(root / "async", checkpoint::RankGroup{}, m, opt,
                                                           state_for(m, step), true, plugin_puts,
                                                           checkpoint::StageLayout{}, /*snapshot=*/true,
                                                           std::move(spent));
    for (model::Unit& unit : m.units()) unit.flat_params().mul_(0.5f).add_(1.0f);  // the next step
    opt.exp_avg()[1].add_(0.25f);
    save->write();
    const fs::path async = save->finish();
    EXPECT_EQ(checkpoint::read_manifest(async).files, checkpoint::read_manifest(blocking).files) << step;
    spent = std::move(save);
  }
}

// A failure while preparing (a plugin's save_state) is the save's outcome in
// finish, on the ranks' agreed path; nothing is published.
TEST_F(Fixture, AFailureWhilePreparingFailsTheSaveAtFinish) {
  model::GptModel m(model::GptConfig{});
  train::FlatAdamW opt(m.units());
  checkpoint::PreparedSave save(root, checkpoint::RankGroup{}, m, opt, state_for(m, 2), true,
                                [](runtime::PluginStateWriter&) { throw std::runtime_error("the disk said no"); },
                                {}, /*snapshot=*/true);
  save.write();
  const std::string error = error_of([&] { save.finish(); });
  EXPECT_NE(error.find("not saved: rank 0: the disk said no"), std::string::npos) << error;
  EXPECT_EQ(checkpoint::find_newest_complete(root), std::nullopt);
}

}  // namespace
