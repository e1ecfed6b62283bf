// Checkpoints of the trainer: a directory holding
//   model.safetensors       the parameters of the units the host keeps
//                           storage for, by name, fp32, global shape
//   optimizer.safetensors   their "<param>.exp_avg" / "<param>.exp_avg_sq",
//                           only when the host ran the optimizer step
//   trainer_state.json      step, data position, RNG seed, loss scaler, the
//                           model's shape (checked on resume), world size
//   plugin_state.safetensors, plugin_state.rank<r>.safetensors
//                           what each rank's plugins put (plugin_state.h)
//   manifest.json           sizes and checksums (atomic_dir.h)
// written by every rank as ROOT/step_N.tmp and renamed to ROOT/step_N only
// once complete (rank_commit.h), so a crash or a failing rank never damages
// the last good checkpoint. Resume reads it through the one CheckpointReader
// (host/runtime/checkpoint_reader.h), by parameter name and global shape, so
// any strategy at any world size resumes any other's checkpoint.
// docs/checkpoint_format.md describes the layout.
//
// Thread-safety: none; the trainer's loop thread calls these.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "host/checkpoint/rank_commit.h"
#include "host/comm/communicator.h"
#include "host/checkpoint/trainer_state.h"
#include "host/model/gpt.h"
#include "host/runtime/checkpoint_reader.h"
#include "host/runtime/plugin_state.h"
#include "host/train/flat_adamw.h"

namespace accel::comm {
class Communicator;
}

namespace accel::checkpoint {

// ---------------------------------------------------------------------------
// Saving
// ---------------------------------------------------------------------------

// Writes the host's own files into `dir` (rank 0's share of a checkpoint):
// model.safetensors with the parameters of every unit whose storage the host
// keeps (omitted when it keeps none), optimizer.safetensors with their AdamW
// moments when `host_optimizer` (the host ran the optimizer step), and
// trainer_state.json. Adds each tensor to `inventory` when given (the
// commit-time tiling check). Returns the names of the files written.
// Parameters split by tensor parallelism are written whole, from `whole`
// (gather_split_tensors); missing there, the save fails naming them. Units
// without host storage whose every parameter is in `whole` (another
// pipeline stage's, gather_stage_units) are written from there.
using WholeTensors = std::map<std::string, at::Tensor>;
std::vector<std::string> write_host_files(const std::filesystem::path& dir, const model::GptModel& model,
                                          train::FlatAdamW& optimizer, const TrainerState& state,
                                          bool host_optimizer, runtime::SliceInventory* inventory = nullptr,
                                          const WholeTensors* whole = nullptr);

// The whole tensors (global shapes, on the CPU) of every tensor-parallel
// split parameter and, with `host_optimizer`, of its AdamW moments
// ("exp_avg/NAME", "exp_avg_sq/NAME"): all-gathered over the tensor group
// (the experts of an expert-parallel run over the expert group), so
// collective — every rank calls it. Empty without either. A
// checkpoint of a tensor-parallel run is therefore the same files as any
// other (global shapes, offsets 0) and resumes at any layout; resuming into
// one, each rank reads its rectangles of the whole tensors.
WholeTensors gather_split_tensors(const model::GptModel& model, train::FlatAdamW& optimizer, bool host_optimizer);

// Where a pipeline run's units live, for rank 0 to write them all.
struct StageLayout {
  comm::Communicator* world = nullptr;  // null: one stage
  std::vector<int32_t> unit_stage;      // each unit's stage
  int32_t ranks_per_stage = 1;          // stage s's first rank is s x this (accel/comm.h)
};

// Adds to `whole` the parameters (global shapes, CPU, fp32) of every unit
// rank 0 does not hold: each stage's first rank sends its units' (whole
// tensors from `whole` where split, else its storage), rank 0 receives. Point
// to point over `stages.world`, so every rank calls it; a no-op with one
// stage. Needs the parameters only (a pipeline strategy saves its own
// optimizer state).
void gather_stage_units(const model::GptModel& model, const StageLayout& stages, WholeTensors& whole);

// The plugins' save_state hooks with `writer` installed as the put target.
using PluginStateSaver = std::function<void(runtime::PluginStateWriter& writer)>;

// The ranks of `world` as a RankGroup whose exchange is an all-gather over
// it; null `world`: one process.
RankGroup rank_group_over(comm::Communicator* world);

// Saves ROOT/step_<state.step> from every rank of `group`: every rank runs
// `save_plugins` (the hooks may be collective) and writes its plugin-state
// file when anything was put; rank 0 also writes the host's files. On rank 0
// the slices of all ranks (the host's tensors included) must tile every
// tensor. Returns the directory on every rank; throws CheckpointError on
// every rank, publishing nothing, when any rank failed.
std::filesystem::path save_checkpoint_from_all_ranks(const std::filesystem::path& root, const RankGroup& group,
                                                     const model::GptModel& model, train::FlatAdamW& optimizer,
                                                     const TrainerState& state, bool host_optimizer,
                                                     const PluginStateSaver& save_plugins = {},
                                                     const StageLayout& stages = {});

// One rank's share of checkpoint ROOT/step_<state.step>, taken at a step
// boundary and written afterwards, in three calls: the constructor and
// finish() are collective, write() is local. save_checkpoint_from_all_ranks
// is the three in a row; train/async_checkpoint.h runs write() on a thread
// of its own while training goes on.
class PreparedSave {
 public:
  // Gathers what ranks gather for a save (tensor groups, pipeline stages),
  // begins the commit (rank 0 makes ROOT/step_N.tmp) and runs
  // `save_plugins`, whose puts are copies. With `snapshot` the host's
  // tensors are copied too (device tensors into pinned host buffers), so
  // training may change them before write(); without, write() reads the
  // live tensors and must come first. A failure here on any rank is
  // reported by finish() on every rank. Collective: every rank, same point.
  // `recycle`, an earlier save that was finished, lends its copies: the
  // snapshot and the plugins' puts copy into them where they fit (the same
  // tensors at every save) instead of into fresh memory, and it is
  // destroyed.
  PreparedSave(const std::filesystem::path& root, const RankGroup& group, const model::GptModel& model,
               train::FlatAdamW& optimizer, const TrainerState& state, bool host_optimizer,
               const PluginStateSaver& save_plugins, const StageLayout& stages, bool snapshot,
               std::unique_ptr<PreparedSave> recycle = nullptr);
  ~PreparedSave();
  PreparedSave(PreparedSave&&) noexcept;
  PreparedSave& operator=(PreparedSave&&) = delete;
  PreparedSave(const PreparedSave&) = delete;
  PreparedSave& operator=(const PreparedSave&) = delete;

  // Copies what the plugins lent (ACCEL_CHECKPOINT_PUT_STABLE puts) into
  // the save's own memory, so their next optimizer step may change it. A
  // background save calls it on the writer's thread before write(), and
  // the trainer waits for it before that step; a blocking save skips it
  // and writes from the plugins' memory. No communication; never throws
  // (a failure is this rank's outcome in finish()).
  void stage();

  // Writes and fsyncs this rank's files into ROOT/step_N.tmp. No
  // communication, so any one thread may call it; once, before finish().
  // Never throws: a failure is this rank's outcome in finish().
  void write();

  // Every rank's outcome, the tiling check, the manifest and the rename.
  // Collective. Returns ROOT/step_N on every rank, or throws CheckpointError
  // on every rank and publishes nothing.
  std::filesystem::path finish();

  // Host memory this save holds in copies (the snapshot and the plugins'
  // puts, the lent ones included once staged), until it is destroyed.
  int64_t host_bytes() const;
  // ROOT/step_N.
  const std::filesystem::path& directory() const;

 private:
  struct Contents;
  std::unique_ptr<Contents> contents_;
};

// One process, no plugins: writes ROOT/step_<state.step> atomically.
std::filesystem::path save_trainer_checkpoint(const std::filesystem::path& root, const model::GptModel& model,
                                              train::FlatAdamW& optimizer, const TrainerState& state);

// ---------------------------------------------------------------------------
// Resuming
// ---------------------------------------------------------------------------

// --resume DIR: DIR itself when it is a checkpoint (holds a manifest), else the
// newest complete step_N under DIR. Throws CheckpointError when there is none.
// `skipped` (if given) receives one line per newer directory passed over and
// why ("step_300: crc32 mismatch for ..."), for the caller to report: a
// fallback to an older checkpoint must never be silent.
std::filesystem::path resolve_resume_dir(const std::filesystem::path& dir,
                                         std::vector<std::string>* skipped = nullptr);

// Throws CheckpointError("'DIR' was written for model ..., this run has ...")
// unless the checkpoint's model shape is this run's.
void check_same_model(const std::filesystem::path& dir, const TrainerState& state, const model::GptModel& model);

// Restores the host's part from `reader`: the parameters of every unit whose
// storage the host keeps (MODEL space, by name and global shape, from
// whichever files hold them), their AdamW moments (OPTIMIZER space) when
// `host_optimizer`, and the optimizer's step count. Everything is checked
// before anything changes; throws CheckpointError naming DIR and the first
// tensor missing, partly saved or of another shape.
void restore_host_state(const std::filesystem::path& dir, const runtime::CheckpointReader& reader,
                        const TrainerState& state, model::GptModel& model, train::FlatAdamW& optimizer,
                        bool host_optimizer);

// All of resume's host side for one directory: read_trainer_state,
// check_same_model, CheckpointReader::open_directory, restore_host_state.
TrainerState load_trainer_checkpoint(const std::filesystem::path& dir, model::GptModel& model,
                                     train::FlatAdamW& optimizer, bool host_optimizer = true);

}  // namespace accel::checkpoint
