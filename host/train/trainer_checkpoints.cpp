// The trainer's side of checkpoints (see trainer.h): resuming the host's
// state from any strategy's checkpoint, handing the plugins the reader for
// theirs, and saving from every rank under one atomic commit. Split from the
// step loop (trainer.cpp) so each file keeps one purpose.
#include <chrono>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include "host/checkpoint/atomic_dir.h"
#include "host/checkpoint/node_copies.h"
#include "host/checkpoint/snapshot_root.h"
#include "host/train/checkpoint_format.h"
#include "host/comm/process_group.h"
#include "host/plugin/hook_dispatch.h"
#include "host/runtime/host_context.h"
#include "host/runtime/plugin_state.h"
#include "host/runtime/trace_scope.h"
#include "host/train/trainer.h"
#include "host/util/log.h"
#include "host/util/strformat.h"

namespace accel::train {

void Trainer::resume_from(const std::string& dir) {
  const runtime::TraceRange range(context_, "checkpoint.load", "checkpoint");
  // Runs after the host materialised its own units: only those are restored
  // here, by name and global shape from whichever files hold them (the
  // plugins load theirs in load_state), so any strategy's checkpoint at any
  // world size resumes here. Every rank reads and checks for itself; nothing
  // changes unless everything checks out.
  std::vector<std::string> skipped;
  const std::filesystem::path checkpoint = checkpoint::resolve_resume_dir(dir, &skipped);
  // Never a silent fallback: every rank says what it passed over and why.
  for (const std::string& why : skipped) {
    log::warn(strformat("--resume: skipped %s/%s; resuming from %s", dir.c_str(), why.c_str(), checkpoint.c_str()));
  }
  metrics_->note_resume_skipped(skipped);
  const checkpoint::TrainerState state = checkpoint::read_trainer_state(checkpoint);
  checkpoint::check_same_model(checkpoint, state, model_);
  auto reader = std::make_unique<runtime::CheckpointReader>(runtime::CheckpointReader::open_directory(checkpoint));
  const bool host_optimizer = !hooks_ || !hooks_->owns_optimizer_step();
  checkpoint::restore_host_state(checkpoint, *reader, state, model_, optimizer_, host_optimizer);
  if (state.data_seed != config_.seed) {
    log::warn(strformat("--seed %llu differs from the checkpoint's %llu; the checkpoint's data order is kept",
                        static_cast<unsigned long long>(config_.seed),
                        static_cast<unsigned long long>(state.data_seed)));
    config_.seed = state.data_seed;
    sampler_ = data::BatchSampler(data_.train->num_windows(), config_.data_order, config_.seed);
  }
  loss_scaler_.restore(state.loss_scale, state.loss_scale_growth_tracker);
  completed_steps_ = state.step;
  resumed_from_ = checkpoint.string();
  saved_plugins_ = state.plugins;
  saved_world_size_ = state.world_size;
  // A checkpoint that names no keys (a dense model, or written before they
  // were kept) leaves --init-from's.
  if (state.hf != HfConfigKeys{}) hf_keys_ = state.hf;
  // Plugins read the same checkpoint in load_state; without plugins there
  // is nothing more to read, so the files close now.
  if (hooks_) resume_reader_ = std::move(reader);
  log::info(strformat("resumed from %s at step %lld", checkpoint.c_str(), static_cast<long long>(state.step)));
}

void Trainer::load_plugin_state() {
  // The reader of resume_from: every rank's plugin-state file and the
  // host's files, so a plugin finds MODEL / OPTIMIZER state whoever saved it.
  if (!resume_reader_) {
    resume_reader_ = std::make_unique<runtime::CheckpointReader>(
        runtime::CheckpointReader::open_directory(resumed_from_));
  }
  context_->state_reader = resume_reader_.get();
  try {
    hooks_->load_state(completed_steps_, saved_world_size_, saved_plugins_.c_str());
  } catch (...) {
    context_->state_reader = nullptr;
    resume_reader_.reset();
    throw;
  }
  context_->state_reader = nullptr;
  resume_reader_.reset();
}

void Trainer::wait_for_staging() {
  if (const std::optional<double> waited = async_save_.wait_staged()) {
    staging_wait_ms_ = staging_wait_ms_.value_or(0.0) + *waited;
  }
}

void Trainer::commit_async_save(StepMetrics* metrics) {
  const runtime::TraceRange range(context_, "checkpoint.commit", "checkpoint");
  const bool snapshot = async_save_is_snapshot_;
  std::filesystem::path path;
  try {
    path = async_save_.commit();
  } catch (const checkpoint::CheckpointError& e) {
    // Every rank holds the same verdict (the commit is agreed). A snapshot
    // that does not fit (Docker's 64 MiB /dev/shm) must not end a run
    // that its checkpoints on disk still protect.
    if (!snapshot) throw;
    suspend_snapshots(e.what());
    return;
  }
  if (metrics) {
    metrics->ckpt_write_ms = async_save_.last_write_ms();
    if (const std::optional<int64_t> step = checkpoint::checkpoint_step(path.filename().string())) {
      metrics->ckpt_committed_step = static_cast<int64_t>(*step);
    }
  }
  if (rank_ == 0) {
    log::info(strformat("saved %s %s (written in the background in %.0f ms)", snapshot ? "snapshot" : "checkpoint",
                        path.c_str(), async_save_.last_write_ms()));
  }
  // Only the newest snapshot is kept, and none older than a checkpoint on
  // disk: memory, not disk.
  drop_snapshots_before(snapshot ? completed_step_of(path) : completed_step_of(path) + 1);
}

int64_t Trainer::completed_step_of(const std::filesystem::path& checkpoint) {
  return static_cast<int64_t>(checkpoint::checkpoint_step(checkpoint.filename().string()).value_or(0));
}

void Trainer::drop_snapshots_before(int64_t step) const {
  // Every rank has committed the checkpoint that supersedes them, and
  // nothing reads the older snapshots while training runs.
  if (config_.snapshot_every == 0 || !prunes_snapshots()) return;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(config_.snapshot_dir, error)) {
    const std::string name = entry.path().filename().string();
    // Only directories Accel wrote (the root was checked at start: nothing else is there).
    if (name.rfind("step_", 0) != 0 || !entry.is_directory(error) || entry.is_symlink(error)) continue;
    // step_N and step_N.tmp alike: a .tmp left by an interrupted save.
    const std::optional<uint64_t> n = checkpoint::checkpoint_step(name.substr(0, name.find('.')));
    if (n && static_cast<int64_t>(*n) < step) std::filesystem::remove_all(entry.path(), error);
  }
}

void Trainer::suspend_snapshots(const std::string& why) {
  snapshots_suspended_ = true;
  if (rank_ == 0) {
    log::warn(strformat("step %lld: the snapshot in %s failed (%s); snapshots are suspended for the rest of this "
                        "run, checkpoints under --save go on",
                        static_cast<long long>(completed_steps_), config_.snapshot_dir.c_str(), why.c_str()));
  }
  if (!prunes_snapshots()) return;
  // Its half-written step_N.tmp holds memory the run needs.
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(config_.snapshot_dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step_", 0) == 0 && name.ends_with(checkpoint::kPendingSuffix) && entry.is_directory(error) &&
        !entry.is_symlink(error)) {
      std::filesystem::remove_all(entry.path(), error);
    }
  }
}

bool Trainer::prunes_snapshots() const {
  const comm::ProcessGroup* world = context_ ? context_->world : nullptr;
  const std::shared_ptr<const std::vector<int>> nodes = world ? world->options().world_nodes : nullptr;
  if (!nodes || nodes->size() != static_cast<size_t>(world_size_)) return rank_ == 0;
  return checkpoint::is_node_leader(*nodes, rank_);
}

void Trainer::remove_snapshots() const {
  if (config_.snapshot_every == 0 || !prunes_snapshots()) return;
  // What Accel wrote there, never the root's other contents (checkpoint/snapshot_root.h).
  if (const std::optional<std::string> left = checkpoint::remove_snapshot_root(config_.snapshot_dir)) log::warn(*left);
}

void Trainer::save_checkpoint(bool periodic, StepMetrics* metrics, bool snapshot) {
  const runtime::TraceRange range(context_, "checkpoint.save", "checkpoint");
  const auto start = std::chrono::steady_clock::now();
  // One save in flight at a time: the previous one is committed first.
  if (async_save_.in_flight()) commit_async_save(nullptr);
  checkpoint::TrainerState state;
  state.step = completed_steps_;
  state.data_position = completed_steps_ * config_.batch_size;
  state.optimizer_steps = optimizer_.step_count();
  state.data_seed = config_.seed;
  state.loss_scale = loss_scaler_.scale();
  state.loss_scale_growth_tracker = loss_scaler_.growth_tracker();
  state.model = model_.config();
  state.world_size = world_size_;
  state.hf = hf_keys_;
  // The load-balancing weight this run trained with; a run without it
  // keeps the one it started from (transformers' router_aux_loss_coef).
  if (model_.config().has_experts() && config_.moe.aux_loss_coef > 0.0) {
    state.hf.router_aux_loss_coef = config_.moe.aux_loss_coef;
  }
  std::string plugins;
  if (hooks_) {
    for (const std::string& name : hooks_->plugin_names()) plugins += (plugins.empty() ? "" : ",") + name;
  }
  state.plugins = plugins;
  // Every rank runs the plugins' save_state (it may be collective) and
  // writes what they put into its own file; rank 0 adds the host's files.
  // Any rank's failure fails the save on every rank, and no rank goes on
  // (or exits) before the checkpoint is committed (rank_commit.h).
  double plugins_ms = 0.0;
  const auto save_plugins = [&](runtime::PluginStateWriter& writer) {
    if (!hooks_) return;
    const runtime::TraceRange plugins_range(context_, "checkpoint.plugin_state", "checkpoint");
    const auto plugins_start = std::chrono::steady_clock::now();
    const auto timed = [&] {
      plugins_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - plugins_start).count();
    };
    context_->state_writer = &writer;
    try {
      hooks_->save_state(completed_steps_, world_size_);
    } catch (...) {
      context_->state_writer = nullptr;
      throw;
    }
    context_->state_writer = nullptr;
    timed();
  };
  const bool host_optimizer = !hooks_ || !hooks_->owns_optimizer_step();
  checkpoint::StageLayout stages;
  if (context_ && context_->model_run.pipeline_size > 1) {
    stages.world = context_->world;
    stages.unit_stage = context_->plan.unit_stage;
    stages.ranks_per_stage = world_size_ / context_->model_run.pipeline_size;
  }
  const bool in_background = snapshot || (periodic && config_.save_async);
  // The last background save's buffers serve this snapshot; a blocking save frees them first.
  std::unique_ptr<checkpoint::PreparedSave> spent = async_save_.take_spent();
  if (!in_background) spent.reset();
  checkpoint::RankGroup group = checkpoint::rank_group_over(world_size_ > 1 ? context_->world : nullptr);
  if (snapshot && snapshot_replicas_) snapshot_replicas_->attach(group);
  checkpoint::PreparedSave save(snapshot ? config_.snapshot_dir : config_.save_dir, group, model_,
                                optimizer_, state, host_optimizer, save_plugins, stages, in_background,
                                std::move(spent));
  const int64_t host_bytes = save.host_bytes();
  // Where the training thread's time goes (docs/benchmarks.md, the background-save table).
  log::debug(strformat("checkpoint step_%lld: prepared in %.0f ms (the plugins' save_state %.0f ms), %lld bytes "
                       "copied",
                       static_cast<long long>(completed_steps_),
                       std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count(),
                       plugins_ms, static_cast<long long>(host_bytes)));
  if (in_background) {
    async_save_.start(std::move(save));
    async_save_is_snapshot_ = snapshot;
  } else {
    save.write();
    const std::filesystem::path path = save.finish();
    optimizer_.drop_moment_views();  // scaled moments: the dequantised copies were for this save only
    if (rank_ == 0) log::info("saved checkpoint " + path.string());
    drop_snapshots_before(completed_step_of(path) + 1);
  }
  if (metrics) {
    metrics->ckpt_blocking_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    metrics->ckpt_host_bytes = host_bytes;
  }
}

}  // namespace accel::train
