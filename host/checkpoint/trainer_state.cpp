// Strict reading and writing of trainer_state.json (see trainer_state.h).
// Every accessor below checks the JSON type exactly (nlohmann's get<int64_t>
// would truncate 2.5 to 2 and wrap -1 into a huge unsigned) before the range.
#include "host/checkpoint/trainer_state.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <set>

#include "host/checkpoint/atomic_dir.h"

namespace accel::checkpoint {
namespace {

using json = nlohmann::json;

// One validated JSON object; errors name the file and the dotted field.
class Fields {
 public:
  Fields(const json& object, std::string where, std::string prefix)
      : object_(object), where_(std::move(where)), prefix_(std::move(prefix)) {
    if (!object_.is_object()) {
      const std::string what = prefix_.empty() ? "the document" : "\"" + prefix_.substr(0, prefix_.size() - 1) + "\"";
      throw CheckpointError("'" + where_ + "': " + what + " must be a JSON object");
    }
  }

  // Unknown keys are refused: a field this build does not understand would
  // be silently dropped on the next save.
  void only(std::initializer_list<const char*> known) const {
    const std::set<std::string> allowed(known.begin(), known.end());
    for (const auto& item : object_.items()) {
      if (!allowed.contains(item.key())) fail(item.key(), "is not a known field");
    }
  }
  bool has(const char* key) const { return object_.contains(key); }

  int64_t integer(const char* key, int64_t min, int64_t max) const {
    const json& v = at(key);
    if (!v.is_number_integer()) fail(key, "must be an integer, got " + v.dump());
    // Unsigned values beyond int64 are out of range, not wrapped.
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(max)) {
      fail(key, "must be at most " + std::to_string(max) + ", got " + v.dump());
    }
    const int64_t value = v.get<int64_t>();
    if (value < min) fail(key, "must be at least " + std::to_string(min) + ", got " + v.dump());
    if (value > max) fail(key, "must be at most " + std::to_string(max) + ", got " + v.dump());
    return value;
  }
  uint64_t unsigned_integer(const char* key) const {
    const json& v = at(key);
    if (!v.is_number_unsigned()) fail(key, "must be an integer >= 0, got " + v.dump());
    return v.get<uint64_t>();
  }
  double positive_finite(const char* key) const {
    const json& v = at(key);
    if (!v.is_number()) fail(key, "must be a number, got " + v.dump());
    const double value = v.get<double>();
    if (!std::isfinite(value) || value <= 0.0) fail(key, "must be a finite number > 0, got " + v.dump());
    return value;
  }
  std::string string(const char* key) const {
    const json& v = at(key);
    if (!v.is_string()) fail(key, "must be a string, got " + v.dump());
    return v.get<std::string>();
  }
  Fields object(const char* key) const { return Fields(at(key), where_, prefix_ + key + "."); }

  [[noreturn]] void fail(const std::string& key, const std::string& problem) const {
    throw CheckpointError("'" + where_ + "': \"" + prefix_ + key + "\" " + problem);
  }

 private:
  const json& at(const char* key) const {
    const auto it = object_.find(key);
    if (it == object_.end()) fail(key, "is missing");
    return *it;
  }

  const json& object_;
  std::string where_;
  std::string prefix_;
};

// A plugin descriptor's name: [a-z][a-z0-9_]* (loaded_plugin.cpp's rule).
bool plugin_name_ok(std::string_view name) {
  if (name.empty() || name.size() > 64 || name[0] < 'a' || name[0] > 'z') return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

// "" or "a,b,c" of valid, distinct plugin names.
void check_plugin_list(const Fields& fields, const std::string& list) {
  if (list.empty()) return;
  std::set<std::string> seen;
  size_t start = 0;
  for (;;) {
    const size_t comma = list.find(',', start);
    const std::string name = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!plugin_name_ok(name) || !seen.insert(name).second) {
      fields.fail("plugins", "must be distinct comma-separated plugin names ([a-z][a-z0-9_]*), got \"" + list +
                                 "\"");
    }
    if (comma == std::string::npos) return;
    start = comma + 1;
  }
}

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
// Model dimensions beyond this are not a GPT this host can build.
constexpr int64_t kMaxDimension = int64_t{1} << 32;
// Ranks of a saving run: far above any real job, far below int32 overflow.
constexpr int64_t kMaxWorldSize = int64_t{1} << 24;

}  // namespace

std::string trainer_state_json(const TrainerState& state) {
  const json j = {
      {"format_version", kTrainerStateFormatVersion},
      {"step", state.step},
      {"data_position", state.data_position},
      {"optimizer_steps", state.optimizer_steps},
      {"rng", {{"kind", kTrainerRngKind}, {"data_seed", state.data_seed}}},
      {"loss_scaler", {{"scale", state.loss_scale}, {"growth_tracker", state.loss_scale_growth_tracker}}},
      {"model",
       {{"n_layer", state.model.n_layer},
        {"n_head", state.model.n_head},
        {"n_embd", state.model.n_embd},
        {"seq_len", state.model.seq_len},
        {"vocab_size", state.model.vocab_size},
        {"family", state.model.family == model::ModelFamily::llama ? "llama" : "gpt2"},
        {"n_kv_head", state.model.n_kv_head},
        {"ffn_size", state.model.ffn_size},
        {"rope_theta", state.model.rope_theta},
        {"norm_eps", state.model.norm_eps}}},
      {"plugins", state.plugins},
      {"world_size", state.world_size}};
  return j.dump(2) + "\n";
}

TrainerState parse_trainer_state(std::string_view text, const std::string& where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw CheckpointError("'" + where + "' is not valid JSON: " + e.what());
  }
  const Fields top(j, where, "");
  // The version first: a newer file's other fields may mean something else.
  const int64_t version = top.integer("format_version", 0, kInt64Max);
  if (version != kTrainerStateFormatVersion) {
    top.fail("format_version", std::to_string(version) + " is not supported (this build reads " +
                                   std::to_string(kTrainerStateFormatVersion) + ")");
  }
  top.only({"format_version", "step", "data_position", "optimizer_steps", "rng", "loss_scaler", "model", "plugins",
            "world_size"});
  TrainerState s;
  s.step = top.integer("step", 0, kInt64Max);
  // Skipped fp16 steps make optimizer_steps smaller, never larger.
  s.optimizer_steps = top.integer("optimizer_steps", 0, s.step);
  s.data_position = top.integer("data_position", 0, kInt64Max);

  const Fields rng = top.object("rng");
  rng.only({"kind", "data_seed"});
  const std::string kind = rng.string("kind");
  if (kind != kTrainerRngKind) rng.fail("kind", "must be \"" + std::string(kTrainerRngKind) + "\", got \"" + kind + "\"");
  s.data_seed = rng.unsigned_integer("data_seed");

  const Fields scaler = top.object("loss_scaler");
  scaler.only({"scale", "growth_tracker"});
  s.loss_scale = scaler.positive_finite("scale");
  s.loss_scale_growth_tracker = scaler.integer("growth_tracker", 0, kInt64Max);

  const Fields model = top.object("model");
  model.only({"n_layer", "n_head", "n_embd", "seq_len", "vocab_size", "family", "n_kv_head", "ffn_size", "rope_theta",
              "norm_eps"});
  s.model.n_layer = model.integer("n_layer", 1, kMaxDimension);
  s.model.n_head = model.integer("n_head", 1, kMaxDimension);
  s.model.n_embd = model.integer("n_embd", 1, kMaxDimension);
  s.model.seq_len = model.integer("seq_len", 1, kMaxDimension);
  s.model.vocab_size = model.integer("vocab_size", 1, kMaxDimension);
  // Optional: GPT-2 checkpoints written before the llama family existed.
  if (model.has("family")) {
    const std::string family = model.string("family");
    if (family != "gpt2" && family != "llama") model.fail("family", "must be \"gpt2\" or \"llama\", got \"" + family + "\"");
    s.model.family = family == "llama" ? model::ModelFamily::llama : model::ModelFamily::gpt2;
  }
  if (s.model.family == model::ModelFamily::llama) {
    s.model.n_kv_head = model.integer("n_kv_head", 1, s.model.n_head);
    if (s.model.n_head % s.model.n_kv_head != 0) model.fail("n_kv_head", "must divide n_head");
    s.model.ffn_size = model.integer("ffn_size", 1, kMaxDimension);
    s.model.rope_theta = model.positive_finite("rope_theta");
  } else if (model.has("n_kv_head") && model.integer("n_kv_head", 0, 0) != 0) {
    model.fail("n_kv_head", "must be 0 for gpt2");
  }
  if (model.has("norm_eps")) s.model.norm_eps = model.positive_finite("norm_eps");

  // Optional: files written before these fields existed.
  if (top.has("plugins")) {
    s.plugins = top.string("plugins");
    check_plugin_list(top, s.plugins);
  }
  if (top.has("world_size")) s.world_size = static_cast<int32_t>(top.integer("world_size", 1, kMaxWorldSize));
  return s;
}

TrainerState read_trainer_state(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / kTrainerStateFile;
  return parse_trainer_state(read_regular_file(path, kMaxTrainerStateBytes), path.string());
}

}  // namespace accel::checkpoint
