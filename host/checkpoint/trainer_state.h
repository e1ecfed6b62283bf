// trainer_state.json: the trainer's own scalars in a checkpoint (step, data
// position, RNG, loss scaler, the model's shape, the saving run's plugins
// and world size, the config.json keys export-hf writes beside the shape), written by rank 0 and read by every rank on resume.
// Parsing is strict because every field steers the resumed run: each one is
// type- and range-checked (a step of -1 would loop forever, a loss scale of 0
// would zero every gradient, 2.5 must not be read as 2), unknown keys are
// refused, and the first problem is reported as one CheckpointError naming
// the file and the field. Free of LibTorch, so the fuzzer links it.
// docs/checkpoint_format.md lists the fields and their limits.
//
// Thread-safety: pure functions of their arguments (and the file read).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "host/checkpoint/safetensors.h"  // CheckpointError
#include "host/model/gpt_config.h"

namespace accel::checkpoint {

inline constexpr const char* kTrainerStateFile = "trainer_state.json";
inline constexpr int kTrainerStateFormatVersion = 1;
// The one RNG the trainer keeps: counter-based, fully described by its seed.
inline constexpr const char* kTrainerRngKind = "counter";
// Largest trainer_state.json read; a real one is well under 1 KiB.
inline constexpr uint64_t kMaxTrainerStateBytes = 1u << 20;

struct TrainerState {
  int64_t step = 0;           // training steps completed
  int64_t optimizer_steps = 0;  // AdamW steps taken: fewer than `step` when fp16 overflow skipped some
  int64_t data_position = 0;  // global sequences consumed
  uint64_t data_seed = 0;     // seeds the data order (no other RNG is stateful)
  double loss_scale = 1.0;
  int64_t loss_scale_growth_tracker = 0;
  model::GptConfig model;
  std::string plugins;        // comma-separated names of the plugins of the saving run
  int32_t world_size = 1;     // ranks of the saving run (1 when the file predates the field)
  HfConfigKeys hf;            // config.json keys beyond the shape, for export-hf ("hf_config"; unset when absent)
};

// The file's text (pretty-printed JSON, newline-terminated).
std::string trainer_state_json(const TrainerState& state);

// Parses and validates the text of a trainer_state.json; `where` names it in
// errors. Throws CheckpointError("'WHERE': <field> ...") on the first problem.
TrainerState parse_trainer_state(std::string_view text, const std::string& where);

// DIR/trainer_state.json, which must be a regular file (not a FIFO, device
// or symlink) of at most kMaxTrainerStateBytes. Throws CheckpointError.
TrainerState read_trainer_state(const std::filesystem::path& dir);

}  // namespace accel::checkpoint
