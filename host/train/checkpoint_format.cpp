// Save and resume of the trainer's checkpoints (see checkpoint_format.h).
#include "host/train/checkpoint_format.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <optional>

#include "host/checkpoint/atomic_dir.h"
#include "host/util/strformat.h"
#include "host/checkpoint/safetensors.h"
#include "host/comm/string_exchange.h"
#include "host/runtime/service_support.h"

namespace accel::checkpoint {
namespace {

namespace fs = std::filesystem;
constexpr const char* kModelFile = runtime::CheckpointReader::kModelFile;
constexpr const char* kOptimizerFile = runtime::CheckpointReader::kOptimizerFile;
// Plugins' ACCEL_CHECKPOINT_EXPORT tensors (accel/checkpoint.h); not read on resume.
constexpr const char* kModel16BitFile = "model_16bit.safetensors";
constexpr const char* kMoments[] = {"exp_avg", "exp_avg_sq"};

// Whether a parameter's local tensor is a slice of the whole (a tensor
// group of one holds it whole, its split notwithstanding).
bool sliced(const model::Param& p) { return p.split.active() && p.split.parts > 1; }

// Units whose storage a plugin took over have no host buffers
// (flat_params() undefined): their state is the plugin's to save.
bool host_keeps(const model::Unit& unit) { return unit.has_params(); }

std::vector<at::Tensor> moments_of(train::FlatAdamW& optimizer, size_t unit) {
  // fp32 (scaled moments: dequantised copies, flat_adamw.h).
  return optimizer.moment_views(unit);
}

// A split parameter's whole tensor from the tensor group's local slices
// (collective over the group: every rank of it calls this, in the same
// order): all-gather, reassemble the fused blocks along the split
// dimension, drop the vocabulary padding.
at::Tensor gather_whole(const model::Param& p, const at::Tensor& local,
                        const std::function<at::Tensor(const at::Tensor&)>& all_gather) {
  const auto d = static_cast<int64_t>(p.split.dim);
  at::Tensor all = all_gather(local.contiguous().reshape({1, -1}).to(at::kFloat));
  std::vector<int64_t> shape = {p.split.parts};
  shape.insert(shape.end(), p.shape.begin(), p.shape.end());
  all = all.view(shape);
  std::vector<at::Tensor> blocks;
  for (int64_t k = 0; k < p.split.stride; ++k) {
    std::vector<at::Tensor> ranks;
    for (int64_t r = 0; r < p.split.parts; ++r) ranks.push_back(all[r].chunk(p.split.stride, d)[k]);
    blocks.push_back(at::cat(ranks, d));
  }
  return at::cat(blocks, d).narrow(d, 0, p.spec.shape[static_cast<size_t>(d)]).contiguous();
}

// The rectangles of the whole tensor a rank's local slice of `p` holds: where
// each starts in the whole tensor and the part of `local` it fills (padded
// vocabulary rows are in none).
struct Rectangle {
  std::vector<int64_t> origin;
  at::Tensor target;
};
std::vector<Rectangle> local_rectangles(const model::Param& p, const at::Tensor& local) {
  const std::vector<int64_t> zeros(p.spec.shape.size(), 0);
  if (!p.split.active()) return {{zeros, local}};
  const auto d = static_cast<size_t>(p.split.dim);
  const int64_t size = p.spec.shape[d];
  const int64_t rows = p.shape[d] / p.split.stride;
  const int64_t block = size / p.split.stride;
  std::vector<Rectangle> out;
  for (int64_t k = 0; k < p.split.stride; ++k) {
    const int64_t first = k * block + p.split.index * rows;
    const int64_t real = std::min(rows, size - first);
    if (real <= 0) continue;
    std::vector<int64_t> origin = zeros;
    origin[d] = first;
    out.push_back({origin, local.narrow(static_cast<int64_t>(d), k * rows, real)});
  }
  return out;
}

}  // namespace

WholeTensors gather_split_tensors(const model::GptModel& model, train::FlatAdamW& optimizer, bool host_optimizer) {
  WholeTensors whole;
  const model::TensorGroup& tp = model.tensor_group();
  const model::ExpertGroup& ep = model.expert_group();
  if (!tp.active() && !ep.active()) return whole;
  for (size_t u = 0; u < model.units().size(); ++u) {
    const model::Unit& unit = model.units()[u];
    if (!host_keeps(unit) || !unit.is_split()) continue;
    const std::vector<at::Tensor> unit_moments =
        host_optimizer ? moments_of(optimizer, u) : std::vector<at::Tensor>();
    for (const model::Param& p : unit.params()) {
      if (!sliced(p)) continue;
      // Experts are split over the expert group, everything else over the tensor group.
      const auto& all_gather = p.spec.role == model::ParamRole::experts ? ep.all_gather : tp.all_gather;
      const auto local = [&](const at::Tensor& flat) { return flat.narrow(0, p.offset, p.numel()).view(p.shape); };
      whole[p.spec.name] = gather_whole(p, local(unit.flat_params()), all_gather).cpu();
      for (size_t m = 0; m < unit_moments.size(); ++m) {
        whole[std::string(kMoments[m]) + "/" + p.spec.name] =
            gather_whole(p, local(unit_moments[m]), all_gather).cpu();
      }
    }
  }
  return whole;
}

// ---------------------------------------------------------------------------
// Saving
// ---------------------------------------------------------------------------

namespace {

// The manifest entry of a file SafetensorsWriter wrote.
ManifestEntry described(const std::string& name, const SafetensorsWriter::Written& written) {
  return {name, written.size, written.crc32};
}

// What write_host_files writes, with the buffers its writers point into.
struct HostFiles {
  SafetensorsWriter weights, moments;
  bool any_unit = false;
  bool host_optimizer = false;
  TrainerState state;
  std::vector<at::Tensor> staged;  // host copies the writers point into
  WholeTensors whole;              // likewise (already copies)
  int64_t copied_bytes = 0;        // bytes of host copies made for the save

  // Adds what it wrote to `out`: the safetensors files with the entries
  // their writer computed, the trainer state to be described.
  void write(const fs::path& dir, RankContribution& out) const {
    if (any_unit) {
      out.described.push_back(described(kModelFile, weights.write(dir / kModelFile)));
      if (host_optimizer) out.described.push_back(described(kOptimizerFile, moments.write(dir / kOptimizerFile)));
    }
    write_file_durably(dir / kTrainerStateFile, trainer_state_json(state));
    out.files.push_back(kTrainerStateFile);
  }
};

// A device tensor's host copy, in pinned memory (the copy engine reads it
// directly), or a CPU tensor itself (`snapshot`: a copy of it). A snapshot
// copies into `spare` (an earlier save's copy) when it fits.
at::Tensor host_copy(const at::Tensor& t, bool snapshot, bool already_a_copy, at::Tensor spare) {
  if (t.is_cpu() && (!snapshot || already_a_copy)) return t;
  if (!snapshot) return t.cpu();
  const bool fits = spare.defined() && spare.sizes() == t.sizes() && spare.scalar_type() == t.scalar_type() &&
                    spare.is_pinned() == t.is_cuda();
  at::Tensor copy = fits ? std::move(spare) : at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(t.is_cuda()));
  copy.copy_(t);
  return copy;
}

// The host's share of a checkpoint (write_host_files's contents), pointing
// into the live tensors or, with `snapshot`, into copies of them.
std::unique_ptr<HostFiles> collect_host_files(const model::GptModel& model, train::FlatAdamW& optimizer,
                                              const TrainerState& state, bool host_optimizer,
                                              runtime::SliceInventory* inventory, WholeTensors whole,
                                              bool snapshot, std::vector<at::Tensor> spare = {}) {
  auto files = std::make_unique<HostFiles>();
  files->state = state;
  files->host_optimizer = host_optimizer;
  files->whole = std::move(whole);
  // A split parameter is written whole, from gather_split_tensors.
  const auto whole_of = [&](const std::string& name) -> const float* {
    const auto it = files->whole.find(name);
    return it == files->whole.end() ? nullptr : it->second.data_ptr<float>();
  };
  SafetensorsWriter& weights = files->weights;
  SafetensorsWriter& moments = files->moments;
  weights.set_metadata("format", "accel");
  // The writer keeps pointers until write(): device buffers (and, for a
  // snapshot, every buffer) are staged in host copies that live as long.
  const auto host_data = [&](const at::Tensor& t, bool already_a_copy) {
    const size_t k = files->staged.size();
    files->staged.push_back(host_copy(t, snapshot, already_a_copy, k < spare.size() ? std::move(spare[k]) : at::Tensor()));
    if (!files->staged.back().is_same(t)) files->copied_bytes += static_cast<int64_t>(files->staged.back().nbytes());
    return files->staged.back().data_ptr<float>();
  };
  const auto note = [&](AccelCheckpointSpace space, const std::string& name, const std::vector<int64_t>& shape) {
    if (inventory) {
      inventory->add(runtime::plugin_state_name(space, "", name), DType::F32, shape,
                     {std::vector<int64_t>(shape.size(), 0), shape});
    }
  };
  for (const auto& [name, tensor] : files->whole) files->copied_bytes += static_cast<int64_t>(tensor.nbytes());
  for (size_t u = 0; u < model.units().size(); ++u) {
    const model::Unit& unit = model.units()[u];
    // Another pipeline stage's unit comes whole from that stage.
    const bool from_stage =
        !host_keeps(unit) && std::all_of(unit.params().begin(), unit.params().end(),
                                         [&](const model::Param& p) { return whole_of(p.spec.name) != nullptr; });
    if (!host_keeps(unit) && !from_stage) continue;
    files->any_unit = true;
    const float* values = from_stage ? nullptr : host_data(unit.flat_params(), false);
    for (const model::Param& p : unit.params()) {
      if (sliced(p) && whole_of(p.spec.name) == nullptr) {
        throw CheckpointError(p.spec.name + " is split over the tensor group and was not gathered");
      }
      const size_t bytes = static_cast<size_t>(p.spec.numel()) * sizeof(float);
      const float* data = sliced(p) || from_stage ? whole_of(p.spec.name) : values + p.offset;
      weights.add(p.spec.name, DType::F32, p.spec.shape, data, bytes);
      note(ACCEL_CHECKPOINT_MODEL, p.spec.name, p.spec.shape);
    }
    if (!host_optimizer) continue;
    if (from_stage) throw CheckpointError("unit " + unit.name() + " is another stage's: its moments are not the host's");
    const std::vector<at::Tensor> unit_moments = moments_of(optimizer, u);
    // Scaled moments' views are dequantised copies already.
    const float* avg = host_data(unit_moments[0], optimizer.scaled());
    const float* avg_sq = host_data(unit_moments[1], optimizer.scaled());
    for (const model::Param& p : unit.params()) {
      const size_t bytes = static_cast<size_t>(p.spec.numel()) * sizeof(float);
      const float* p_avg = sliced(p) ? whole_of(std::string("exp_avg/") + p.spec.name) : avg + p.offset;
      const float* p_avg_sq = sliced(p) ? whole_of(std::string("exp_avg_sq/") + p.spec.name) : avg_sq + p.offset;
      if (p_avg == nullptr || p_avg_sq == nullptr) {
        throw CheckpointError(p.spec.name + "'s moments are split over the tensor group and were not gathered");
      }
      moments.add(p.spec.name + ".exp_avg", DType::F32, p.spec.shape, p_avg, bytes);
      moments.add(p.spec.name + ".exp_avg_sq", DType::F32, p.spec.shape, p_avg_sq, bytes);
      note(ACCEL_CHECKPOINT_OPTIMIZER, std::string("exp_avg/") + p.spec.name, p.spec.shape);
      note(ACCEL_CHECKPOINT_OPTIMIZER, std::string("exp_avg_sq/") + p.spec.name, p.spec.shape);
    }
  }
  return files;
}

}  // namespace

std::vector<std::string> write_host_files(const fs::path& dir, const model::GptModel& model,
                                          train::FlatAdamW& optimizer, const TrainerState& state,
                                          bool host_optimizer, runtime::SliceInventory* inventory,
                                          const WholeTensors* whole) {
  RankContribution written;
  collect_host_files(model, optimizer, state, host_optimizer, inventory, whole ? *whole : WholeTensors{},
                     /*snapshot=*/false)
      ->write(dir, written);
  std::vector<std::string> files;
  for (const ManifestEntry& entry : written.described) files.push_back(entry.file);
  files.insert(files.end(), written.files.begin(), written.files.end());
  return files;
}

void gather_stage_units(const model::GptModel& model, const StageLayout& stages, WholeTensors& whole) {
  if (stages.world == nullptr || stages.unit_stage.empty()) return;
  const int rank = stages.world->rank();
  const int32_t my_stage = rank / stages.ranks_per_stage;
  const bool sender = my_stage > 0 && rank % stages.ranks_per_stage == 0;
  if (rank != 0 && !sender) return;
  const comm::OpOptions options{0, "host checkpoint: a stage's units to rank 0"};
  for (size_t u = 0; u < model.units().size(); ++u) {
    const int32_t stage = stages.unit_stage[u];
    if (stage == 0 || (sender && stage != my_stage)) continue;
    const model::Unit& unit = model.units()[u];
    for (const model::Param& p : unit.params()) {
      if (sender) {
        const auto found = whole.find(p.spec.name);
        if (found == whole.end() && !unit.has_params()) {
          throw CheckpointError("unit " + unit.name() + " of stage " + std::to_string(my_stage) +
                                ": its parameters are a plugin's (managed storage), which a pipeline save cannot "
                                "send to rank 0");
        }
        const at::Tensor tensor =
            (found != whole.end() ? found->second : unit.flat_params().narrow(0, p.offset, p.numel()))
                .to(at::kCPU, at::kFloat)
                .contiguous();
        const comm::Status status =
            stages.world->send(comm::host_buffer(tensor.data_ptr(), tensor.numel(), comm::DType::f32), 0, 0, options);
        if (!status.ok()) throw CheckpointError(status.message);
        continue;
      }
      at::Tensor tensor = at::empty(p.spec.shape, at::kFloat);
      const comm::Status status = stages.world->recv(comm::host_buffer(tensor.data_ptr(), tensor.numel(),
                                                                       comm::DType::f32),
                                                     stage * stages.ranks_per_stage, 0, options);
      if (!status.ok()) throw CheckpointError(status.message);
      whole[p.spec.name] = std::move(tensor);
    }
  }
}

RankGroup rank_group_over(comm::Communicator* world) {
  RankGroup group;
  if (world == nullptr || world->size() == 1) return group;
  group.rank = world->rank();
  group.world_size = world->size();
  group.exchange = [world](const std::string& mine) {
    return comm::all_gather_strings(*world, mine, "host checkpoint commit");
  };
  return group;
}

struct PreparedSave::Contents {
  std::optional<RankCommit> commit;
  int rank = 0;
  std::unique_ptr<HostFiles> host;  // rank 0's
  runtime::PluginStateWriter plugins;
  std::string inventory;  // this rank's slices, for rank 0's tiling check
  std::string error;      // a failure while preparing, reported by write
  bool snapshot = false;  // a background save: the lent puts are staged
};

PreparedSave::PreparedSave(const fs::path& root, const RankGroup& group, const model::GptModel& model,
                           train::FlatAdamW& optimizer, const TrainerState& state, bool host_optimizer,
                           const PluginStateSaver& save_plugins, const StageLayout& stages, bool snapshot,
                           std::unique_ptr<PreparedSave> recycle)
    : contents_(std::make_unique<Contents>()) {
  contents_->rank = group.rank;
  contents_->snapshot = snapshot;
  std::vector<at::Tensor> spare;
  if (recycle) {
    contents_->plugins.recycle(std::move(recycle->contents_->plugins));
    if (recycle->contents_->host) spare = std::move(recycle->contents_->host->staged);
    recycle.reset();  // what did not fit is freed before this save copies
  }
  // Collective over each tensor group, so on every rank, before any writes;
  // then the other stages' units reach rank 0.
  WholeTensors whole = gather_split_tensors(model, optimizer, host_optimizer);
  gather_stage_units(model, stages, whole);
  contents_->commit.emplace(RankCommit::begin(root, "step_" + std::to_string(state.step), group));
  // The plugins' hooks may be collective: they run here, on every rank,
  // whatever fails; a failure is this rank's message in finish.
  try {
    if (save_plugins) save_plugins(contents_->plugins);
    runtime::SliceInventory inventory = contents_->plugins.inventory();
    if (group.rank == 0) {
      contents_->host = collect_host_files(model, optimizer, state, host_optimizer, &inventory, std::move(whole),
                                           snapshot, std::move(spare));
    }
    contents_->inventory = inventory.to_json();
  } catch (const std::exception& e) {
    contents_->error = e.what()[0] != '\0' ? e.what() : "unknown error";
  } catch (...) {
    contents_->error = "unknown error";
  }
  // Scaled moments: the dequantised copies served the snapshot only.
  if (snapshot) optimizer.drop_moment_views();
}

PreparedSave::~PreparedSave() = default;
PreparedSave::PreparedSave(PreparedSave&&) noexcept = default;

void PreparedSave::stage() {
  Contents& c = *contents_;
  try {
    c.plugins.stage();
  } catch (const std::exception& e) {  // out of memory: this rank's outcome
    if (c.error.empty()) c.error = std::string("staging the plugins' state: ") + e.what();
  }
}

void PreparedSave::write() {
  Contents& c = *contents_;
  c.commit->write([&c](const fs::path& dir) {
    if (!c.error.empty()) throw CheckpointError(c.error);
    RankContribution contribution;
    if (c.host) c.host->write(dir, contribution);
    if (!c.plugins.empty()) {
      const std::string name = runtime::plugin_state_file_name(c.rank);
      contribution.described.push_back(described(name, c.plugins.write(dir / name)));
    }
    if (c.plugins.has_exports()) {  // world rank 0's alone (checkpoint_services.cpp)
      contribution.described.push_back(described(kModel16BitFile, c.plugins.write_exports(dir / kModel16BitFile)));
    }
    contribution.note = c.inventory;
    return contribution;
  });
}

fs::path PreparedSave::finish() {
  return contents_->commit->finish([](const std::vector<std::string>& notes) {
    std::vector<runtime::SliceInventory> ranks;
    for (const std::string& note : notes) ranks.push_back(runtime::SliceInventory::from_json(note));
    runtime::SliceInventory::check_tiling(ranks);
  });
}

int64_t PreparedSave::host_bytes() const {
  // A background save will copy what the plugins lent; a blocking one writes it from their memory.
  return (contents_->host ? contents_->host->copied_bytes : 0) + contents_->plugins.held_bytes() +
         (contents_->snapshot ? contents_->plugins.lent_bytes() : 0);
}

const fs::path& PreparedSave::directory() const { return contents_->commit->final_dir(); }

fs::path save_checkpoint_from_all_ranks(const fs::path& root, const RankGroup& group, const model::GptModel& model,
                                        train::FlatAdamW& optimizer, const TrainerState& state, bool host_optimizer,
                                        const PluginStateSaver& save_plugins, const StageLayout& stages) {
  PreparedSave save(root, group, model, optimizer, state, host_optimizer, save_plugins, stages, /*snapshot=*/false);
  save.write();
  fs::path saved = save.finish();
  optimizer.drop_moment_views();  // scaled moments: the dequantised copies were for this save only
  return saved;
}

fs::path save_trainer_checkpoint(const fs::path& root, const model::GptModel& model, train::FlatAdamW& optimizer,
                                 const TrainerState& state) {
  return save_checkpoint_from_all_ranks(root, RankGroup{}, model, optimizer, state, /*host_optimizer=*/true);
}

// ---------------------------------------------------------------------------
// Resuming
// ---------------------------------------------------------------------------

namespace {

// resolve_resume_dir's check of a candidate: the step its trainer state
// holds is the step its name gives (a step_8 holding step 4 would rewind
// the run silently).
std::optional<std::string> step_differs_from_name(const fs::path& dir, uint64_t named_step) {
  try {
    const int64_t step = read_trainer_state(dir).step;
    if (static_cast<uint64_t>(step) == named_step) return std::nullopt;
    return strformat("its trainer_state.json is of step %lld, not the step its name says (copied or renamed by "
                     "hand? ignored)",
                     static_cast<long long>(step));
  } catch (const CheckpointError& e) {
    return e.what();
  }
}

}  // namespace

fs::path resolve_resume_dir(const fs::path& dir, std::vector<std::string>* skipped) {
  if (!fs::is_directory(dir)) throw CheckpointError("--resume: '" + dir.string() + "' is not a directory");
  if (fs::exists(dir / kManifestFileName)) {
    std::string why;
    if (!verify_manifest(dir, &why)) throw CheckpointError("--resume: '" + dir.string() + "' is damaged: " + why);
    // A step directory named by hand: its name must say what it holds.
    const std::optional<uint64_t> named = checkpoint_step(fs::absolute(dir).lexically_normal().filename().string());
    if (named) {
      if (const std::optional<std::string> differs = step_differs_from_name(dir, *named)) {
        throw CheckpointError("--resume: '" + dir.string() + "': " + *differs);
      }
    }
    return dir;
  }
  std::vector<std::string> passed_over;
  if (auto newest = find_newest_complete(dir, "step_", &passed_over, step_differs_from_name)) {
    if (skipped != nullptr) *skipped = std::move(passed_over);
    return *newest;
  }
  std::string why;
  for (const std::string& line : passed_over) why += (why.empty() ? " (" : "; ") + line;
  throw CheckpointError("--resume: '" + dir.string() + "' holds no complete checkpoint" + (why.empty() ? "" : why + ")"));
}

void check_same_model(const fs::path& dir, const TrainerState& state, const model::GptModel& model) {
  if (!(state.model == model.config())) {
    throw CheckpointError("'" + dir.string() + "' was written for model " + state.model.describe() +
                          ", this run has " + model.config().describe());
  }
}

void restore_host_state(const fs::path& dir, const runtime::CheckpointReader& reader, const TrainerState& state,
                        model::GptModel& model, train::FlatAdamW& optimizer, bool host_optimizer) {
  // One tensor to restore: where it comes from and the view it fills.
  // A tensor-parallel slice reads its rectangles of the whole tensor, from
  // whatever layout wrote it.
  struct Restore {
    AccelCheckpointSpace space;
    std::string name;
    const std::vector<int64_t>* shape;
    std::vector<int64_t> origin;
    at::Tensor destination;
  };
  std::vector<Restore> restores;
  const auto add = [&](AccelCheckpointSpace space, const std::string& name, const model::Param& p,
                       const at::Tensor& flat) {
    for (Rectangle& r : local_rectangles(p, flat.narrow(0, p.offset, p.numel()).view(p.shape))) {
      restores.push_back({space, name, &p.spec.shape, std::move(r.origin), std::move(r.target)});
    }
  };
  for (size_t u = 0; u < model.units().size(); ++u) {
    model::Unit& unit = model.units()[u];
    if (!host_keeps(unit)) continue;
    for (const model::Param& p : unit.params()) add(ACCEL_CHECKPOINT_MODEL, p.spec.name, p, unit.flat_params());
    if (!host_optimizer) continue;
    const std::vector<at::Tensor> unit_moments = moments_of(optimizer, u);
    for (size_t m = 0; m < unit_moments.size(); ++m) {
      for (const model::Param& p : unit.params()) {
        add(ACCEL_CHECKPOINT_OPTIMIZER, std::string(kMoments[m]) + "/" + p.spec.name, p, unit_moments[m]);
      }
    }
  }
  const std::string where = "'" + dir.string() + "': ";
  const auto run = [&](const char* what, const auto& body) {
    try {
      body();
    } catch (const runtime::ServiceError& e) {
      throw CheckpointError(where + what + ": " + e.what());
    }
  };
  // Check every tensor first, so a bad checkpoint changes nothing in memory.
  for (const Restore& r : restores) {
    const std::vector<int64_t> extent(r.destination.sizes().begin(), r.destination.sizes().end());
    run(r.space == ACCEL_CHECKPOINT_MODEL ? "parameters" : "optimizer state", [&] {
      reader.check_readable("", r.space, r.name, *r.shape, r.origin, extent, r.destination.scalar_type());
    });
  }
  at::NoGradGuard no_grad;
  for (const Restore& r : restores) {
    if (r.destination.is_contiguous()) {
      run("reading", [&] { reader.read("", r.space, r.name, *r.shape, r.origin, r.destination); });
      continue;
    }
    at::Tensor staging = at::empty(r.destination.sizes(), r.destination.options());
    run("reading", [&] { reader.read("", r.space, r.name, *r.shape, r.origin, staging); });
    r.destination.copy_(staging);
  }
  // Scaled moments: the fp32 values read become the stored format again.
  if (host_optimizer) optimizer.commit_moment_views();
  // Not state.step: skipped fp16 steps do not advance AdamW's bias
  // correction. Set whoever runs the step: a plugin's optimizer_step is
  // told the host's count.
  optimizer.set_step_count(state.optimizer_steps);
}

TrainerState load_trainer_checkpoint(const fs::path& dir, model::GptModel& model, train::FlatAdamW& optimizer,
                                     bool host_optimizer) {
  TrainerState state = read_trainer_state(dir);
  check_same_model(dir, state, model);
  const runtime::CheckpointReader reader = runtime::CheckpointReader::open_directory(dir);
  restore_host_state(dir, reader, state, model, optimizer, host_optimizer);
  return state;
}

}  // namespace accel::checkpoint
