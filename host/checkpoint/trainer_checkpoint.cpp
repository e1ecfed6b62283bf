// Save and resume of the single-process trainer (see trainer_checkpoint.h).
#include "host/checkpoint/trainer_checkpoint.h"

#include <nlohmann/json.hpp>

#include <fstream>

#include "host/checkpoint/atomic_dir.h"
#include "host/checkpoint/safetensors.h"

namespace accel::checkpoint {
namespace {

namespace fs = std::filesystem;
constexpr int kStateFormatVersion = 1;

nlohmann::json to_json(const model::GptConfig& c) {
  return {{"n_layer", c.n_layer}, {"n_head", c.n_head}, {"n_embd", c.n_embd},
          {"seq_len", c.seq_len}, {"vocab_size", c.vocab_size}};
}

model::GptConfig gpt_config_from_json(const nlohmann::json& j) {
  model::GptConfig c;
  c.n_layer = j.at("n_layer").get<int64_t>();
  c.n_head = j.at("n_head").get<int64_t>();
  c.n_embd = j.at("n_embd").get<int64_t>();
  c.seq_len = j.at("seq_len").get<int64_t>();
  c.vocab_size = j.at("vocab_size").get<int64_t>();
  return c;
}

void write_text_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw CheckpointError("cannot write '" + path.string() + "'");
}

TrainerState read_state(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw CheckpointError("'" + path.string() + "' is missing");
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    if (j.at("format_version").get<int>() != kStateFormatVersion) {
      throw CheckpointError("'" + path.string() + "' has unsupported format_version " +
                            j.at("format_version").dump());
    }
    TrainerState s;
    s.step = j.at("step").get<int64_t>();
    s.data_position = j.at("data_position").get<int64_t>();
    s.optimizer_steps = j.at("optimizer_steps").get<int64_t>();
    s.data_seed = j.at("rng").at("data_seed").get<uint64_t>();
    s.loss_scale = j.at("loss_scaler").at("scale").get<double>();
    s.loss_scale_growth_tracker = j.at("loss_scaler").at("growth_tracker").get<int64_t>();
    s.model = gpt_config_from_json(j.at("model"));
    s.plugins = j.value("plugins", std::string());
    return s;
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError("'" + path.string() + "' is not a valid trainer state: " + e.what());
  }
}

// One tensor to restore: where it comes from and where it goes.
struct TensorRestore {
  const SafetensorsFile* file;
  const fs::path* path;
  std::string name;
  const std::vector<int64_t>* shape;
  float* destination;
};

// Checks every tensor first, so a bad checkpoint changes nothing in memory.
void restore_all(const std::vector<TensorRestore>& restores) {
  std::vector<const TensorInfo*> infos;
  for (const TensorRestore& r : restores) {
    const TensorInfo* info = r.file->find(r.name);
    if (!info) throw CheckpointError("'" + r.path->string() + "' has no tensor '" + r.name + "'");
    if (info->dtype != DType::F32 || info->shape != *r.shape) {
      std::string want;
      for (int64_t d : *r.shape) want += (want.empty() ? "" : ",") + std::to_string(d);
      throw CheckpointError("'" + r.path->string() + "': tensor '" + r.name + "' is " +
                            std::string(dtype_name(info->dtype)) + " of another shape; expected F32 [" +
                            want + "]");
    }
    infos.push_back(info);
  }
  for (size_t i = 0; i < restores.size(); ++i) {
    restores[i].file->read(*infos[i], restores[i].destination, infos[i]->data_end - infos[i]->data_begin);
  }
}

}  // namespace

fs::path save_trainer_checkpoint(const fs::path& root, const model::GptModel& model,
                                 train::FlatAdamW& optimizer, const TrainerState& state,
                                 const ExtraFilesWriter& write_extra) {
  PendingCheckpointDir pending = PendingCheckpointDir::create(root, "step_" + std::to_string(state.step));

  SafetensorsWriter weights;
  SafetensorsWriter moments;
  weights.set_metadata("format", "accel");
  // The writer keeps pointers until write(): device buffers are staged in
  // host copies that live until then.
  std::vector<at::Tensor> staged;
  auto host_data = [&](const at::Tensor& t) {
    staged.push_back(t.is_cpu() ? t : t.cpu());
    return staged.back().data_ptr<float>();
  };
  for (size_t u = 0; u < model.units().size(); ++u) {
    const model::Unit& unit = model.units()[u];
    const float* values = host_data(unit.flat_params());
    const float* avg = host_data(optimizer.exp_avg()[u]);
    const float* avg_sq = host_data(optimizer.exp_avg_sq()[u]);
    for (const model::Param& p : unit.params()) {
      const size_t bytes = static_cast<size_t>(p.spec.numel()) * sizeof(float);
      weights.add(p.spec.name, DType::F32, p.spec.shape, values + p.offset, bytes);
      moments.add(p.spec.name + ".exp_avg", DType::F32, p.spec.shape, avg + p.offset, bytes);
      moments.add(p.spec.name + ".exp_avg_sq", DType::F32, p.spec.shape, avg_sq + p.offset, bytes);
    }
  }
  weights.write(pending.dir() / "model.safetensors");
  moments.write(pending.dir() / "optimizer.safetensors");

  const nlohmann::json j = {
      {"format_version", kStateFormatVersion},
      {"step", state.step},
      {"data_position", state.data_position},
      {"optimizer_steps", state.optimizer_steps},
      {"rng", {{"kind", "counter"}, {"data_seed", state.data_seed}}},
      {"loss_scaler", {{"scale", state.loss_scale}, {"growth_tracker", state.loss_scale_growth_tracker}}},
      {"model", to_json(state.model)},
      {"plugins", state.plugins}};
  write_text_file(pending.dir() / "trainer_state.json", j.dump(2) + "\n");
  if (write_extra) write_extra(pending.dir());
  pending.commit();
  return pending.final_dir();
}

fs::path resolve_resume_dir(const fs::path& dir) {
  if (!fs::is_directory(dir)) throw CheckpointError("--resume: '" + dir.string() + "' is not a directory");
  if (fs::exists(dir / "manifest.json")) {
    std::string why;
    if (!verify_manifest(dir, &why)) throw CheckpointError("--resume: '" + dir.string() + "' is damaged: " + why);
    return dir;
  }
  if (auto newest = find_newest_complete(dir)) return *newest;
  throw CheckpointError("--resume: '" + dir.string() + "' holds no complete checkpoint");
}

TrainerState load_trainer_checkpoint(const fs::path& dir, model::GptModel& model, train::FlatAdamW& optimizer) {
  TrainerState state = read_state(dir / "trainer_state.json");
  if (!(state.model == model.config())) {
    throw CheckpointError("'" + dir.string() + "' was written for model " + state.model.describe() +
                          ", this run has " + model.config().describe());
  }
  const fs::path weights_path = dir / "model.safetensors";
  const fs::path moments_path = dir / "optimizer.safetensors";
  const SafetensorsFile weights = SafetensorsFile::open(weights_path);
  const SafetensorsFile moments = SafetensorsFile::open(moments_path);

  // Device buffers are filled through host staging copies, after every
  // tensor was checked (restore_all), so a bad checkpoint changes nothing.
  std::vector<std::pair<at::Tensor, at::Tensor>> staged;  // (device target, host copy)
  auto host_data = [&](at::Tensor& t) {
    if (t.is_cpu()) return t.data_ptr<float>();
    staged.emplace_back(t, at::empty_like(t, at::kCPU));
    return staged.back().second.data_ptr<float>();
  };
  std::vector<TensorRestore> restores;
  for (size_t u = 0; u < model.units().size(); ++u) {
    model::Unit& unit = model.units()[u];
    float* values = host_data(unit.flat_params());
    float* avg = host_data(optimizer.exp_avg()[u]);
    float* avg_sq = host_data(optimizer.exp_avg_sq()[u]);
    for (const model::Param& p : unit.params()) {
      restores.push_back({&weights, &weights_path, p.spec.name, &p.spec.shape, values + p.offset});
      restores.push_back({&moments, &moments_path, p.spec.name + ".exp_avg", &p.spec.shape, avg + p.offset});
      restores.push_back({&moments, &moments_path, p.spec.name + ".exp_avg_sq", &p.spec.shape, avg_sq + p.offset});
    }
  }
  restore_all(restores);
  at::NoGradGuard no_grad;
  for (auto& [target, host] : staged) target.copy_(host);
  // Not state.step: skipped fp16 steps do not advance AdamW's bias correction.
  optimizer.set_step_count(state.optimizer_steps);
  return state;
}

}  // namespace accel::checkpoint
