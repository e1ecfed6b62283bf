// Checkpoints of the single-process trainer: a directory holding
//   model.safetensors       every parameter by name, fp32, global shape
//   optimizer.safetensors   "<param>.exp_avg" / "<param>.exp_avg_sq"
//   trainer_state.json      step, data position, RNG seed, loss scaler,
//                           the model's shape (checked on resume)
//   manifest.json           sizes and checksums (atomic_dir.h)
// written as ROOT/step_N.tmp and renamed to ROOT/step_N only once complete,
// so a crash mid-save never damages the last good checkpoint.
// docs/checkpoint_format.md describes the layout.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include "host/model/gpt.h"
#include "host/train/flat_adamw.h"

namespace accel::checkpoint {

struct TrainerState {
  int64_t step = 0;           // training steps completed
  int64_t optimizer_steps = 0;  // AdamW steps taken: fewer than `step` when fp16 overflow skipped some
  int64_t data_position = 0;  // global sequences consumed
  uint64_t data_seed = 0;     // seeds the data order (no other RNG is stateful)
  double loss_scale = 1.0;
  int64_t loss_scale_growth_tracker = 0;
  model::GptConfig model;
  std::string plugins;        // comma-separated names of the plugins of the saving run
};

// Writes extra files (the plugins' state) into the pending directory before
// the checkpoint is committed, so they are covered by its manifest.
using ExtraFilesWriter = std::function<void(const std::filesystem::path& pending_dir)>;

// Writes ROOT/step_<state.step> atomically; returns its path.
std::filesystem::path save_trainer_checkpoint(const std::filesystem::path& root,
                                              const model::GptModel& model,
                                              train::FlatAdamW& optimizer, const TrainerState& state,
                                              const ExtraFilesWriter& write_extra = {});

// --resume DIR: DIR itself when it is a checkpoint (holds a manifest), else the
// newest complete step_N under DIR. Throws CheckpointError when there is none.
std::filesystem::path resolve_resume_dir(const std::filesystem::path& dir);

// Loads weights and optimizer state in place. Throws CheckpointError naming
// the file and the problem (verification failure, missing tensor, shape or
// model mismatch) before changing anything it cannot finish.
TrainerState load_trainer_checkpoint(const std::filesystem::path& dir, model::GptModel& model,
                                     train::FlatAdamW& optimizer);

}  // namespace accel::checkpoint
