// Strict reading and writing of trainer_state.json (see trainer_state.h).
// Fields are read through sdk::JsonFields (accel/sdk/json_input.hpp), which
// checks the JSON type exactly (nlohmann's get<int64_t> would truncate 2.5 to
// 2 and wrap -1 into a huge unsigned) before the range, and quotes values
// through describe(); the document is parsed with the SDK's depth limit.
#include "host/checkpoint/trainer_state.h"

#include <nlohmann/json.hpp>

#include <limits>
#include <set>

#include "host/checkpoint/atomic_dir.h"
#include "host/checkpoint/block_choices_json.h"
#include "host/checkpoint/checkpoint_json.h"
#include "host/checkpoint/rope_json.h"
#include "host/model/model_limits.h"

namespace accel::checkpoint {
namespace {

using json = nlohmann::json;
using sdk::JsonFields;

// A plugin descriptor's name: [a-z][a-z0-9_]* (loaded_plugin.cpp's rule).
bool plugin_name_ok(std::string_view name) {
  if (name.empty() || name.size() > 64 || name[0] < 'a' || name[0] > 'z') return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

// "" or "a,b,c" of valid, distinct plugin names.
void check_plugin_list(const JsonFields& fields, const std::string& list) {
  if (list.empty()) return;
  std::set<std::string> seen;
  size_t start = 0;
  for (;;) {
    const size_t comma = list.find(',', start);
    const std::string name = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!plugin_name_ok(name) || !seen.insert(name).second) {
      fields.fail("plugins", "must be distinct comma-separated plugin names ([a-z][a-z0-9_]*), got " +
                                 sdk::describe(fields.value("plugins")));
    }
    if (comma == std::string::npos) return;
    start = comma + 1;
  }
}

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
// Model dimensions beyond this are not a GPT this host can build.
constexpr int64_t kMaxDimension = model::kMaxModelDimension;
// Ranks of a saving run: far above any real job, far below int32 overflow.
constexpr int64_t kMaxWorldSize = int64_t{1} << 24;

// Granite's scalars: written only when not the default (`none`).
struct ModelScalar {
  const char* key;
  double model::GptConfig::*value;
  double none;
};
constexpr ModelScalar kModelScalars[] = {{"embedding_multiplier", &model::GptConfig::embedding_multiplier, 1.0},
                                         {"residual_multiplier", &model::GptConfig::residual_multiplier, 1.0},
                                         {"logits_scaling", &model::GptConfig::logits_scaling, 1.0},
                                         {"attention_multiplier", &model::GptConfig::attention_multiplier, 0.0},
                                         {"query_position_scale_beta", &model::GptConfig::query_position_scale_beta,
                                          0.0}};

}  // namespace

std::string trainer_state_json(const TrainerState& state) {
  json j = {
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
        {"norm_eps", state.model.norm_eps},
        {"n_experts", state.model.n_experts},
        {"experts_per_token", state.model.experts_per_token}}},
      {"plugins", state.plugins},
      {"world_size", state.world_size}};
  if (state.model.qkv_bias) j["model"]["qkv_bias"] = true;  // absent: Llama's attention, no biases
  // The decoder's other choices, each written only when it is not Llama's
  // default, so files of the presets stay what they were.
  if (state.model.head_dim > 0) j["model"]["head_dim"] = state.model.head_dim;
  if (state.model.tie_embeddings) j["model"]["tie_embeddings"] = true;
  if (state.model.qk_norm) j["model"]["qk_norm"] = true;
  if (state.model.sliding_window > 0) j["model"]["sliding_window"] = state.model.sliding_window;
  if (state.model.rope_scaling.kind != RopeScaling::Kind::none) {
    j["model"]["rope_scaling"] = rope_scaling_json(state.model.rope_scaling);
  }
  if (state.model.partial_rotary_factor != 1.0) j["model"]["partial_rotary_factor"] = state.model.partial_rotary_factor;
  if (!state.model.nope_layers.empty()) j["model"]["nope_layers"] = state.model.nope_layers;
  for (const auto& [key, value, none] : kModelScalars) {
    if (state.model.*value != none) j["model"][key] = state.model.*value;
  }
  if (!state.model.block.is_default()) j["model"]["block"] = block_choices_json(state.model.block);
  if (state.model.has_experts()) {  // a mixture of experts' routing variants (absent: Mixtral's)
    j["model"]["shared_expert_size"] = state.model.shared_expert_size;
    j["model"]["normalize_top_k"] = state.model.normalize_top_k;
  }
  if (state.hf.router_aux_loss_coef) j["hf_config"]["router_aux_loss_coef"] = *state.hf.router_aux_loss_coef;
  if (state.hf.intermediate_size) j["hf_config"]["intermediate_size"] = *state.hf.intermediate_size;
  if (state.hf.model_type) j["hf_config"]["model_type"] = *state.hf.model_type;
  return j.dump(2) + "\n";
}

// The fields of `document`; messages begin "'<where>': ".
static TrainerState read_fields(const json& document, const std::string& where) {
  const JsonFields top(document, "'" + where + "'");
  // The version first: a newer file's other fields may mean something else.
  const int64_t version = top.integer("format_version", 0, kInt64Max);
  if (version != kTrainerStateFormatVersion) {
    top.fail("format_version", std::to_string(version) + " is not supported (this build reads " +
                                   std::to_string(kTrainerStateFormatVersion) + ")");
  }
  top.only({"format_version", "step", "data_position", "optimizer_steps", "rng", "loss_scaler", "model", "plugins",
            "world_size", "hf_config"});
  TrainerState s;
  s.step = top.integer("step", 0, kInt64Max);
  // Skipped fp16 steps make optimizer_steps smaller, never larger.
  s.optimizer_steps = top.integer("optimizer_steps", 0, s.step);
  s.data_position = top.integer("data_position", 0, kInt64Max);

  const JsonFields rng = top.object("rng");
  rng.only({"kind", "data_seed"});
  const std::string kind = rng.string("kind");
  if (kind != kTrainerRngKind) {
    rng.fail("kind", "must be \"" + std::string(kTrainerRngKind) + "\", got " + sdk::describe(rng.value("kind")));
  }
  s.data_seed = rng.unsigned_integer("data_seed");

  const JsonFields scaler = top.object("loss_scaler");
  scaler.only({"scale", "growth_tracker"});
  s.loss_scale = scaler.positive_finite("scale");
  s.loss_scale_growth_tracker = scaler.integer("growth_tracker", 0, kInt64Max);

  const JsonFields model = top.object("model");
  model.only({"n_layer", "n_head", "n_embd", "seq_len", "vocab_size", "family", "n_kv_head", "ffn_size", "rope_theta",
              "norm_eps", "n_experts", "experts_per_token", "shared_expert_size", "normalize_top_k", "qkv_bias",
              "head_dim", "tie_embeddings", "qk_norm", "sliding_window", "rope_scaling", "partial_rotary_factor",
              "nope_layers", "embedding_multiplier", "residual_multiplier", "logits_scaling",
              "attention_multiplier", "query_position_scale_beta", "block"});
  s.model.n_layer = model.integer("n_layer", 1, kMaxDimension);
  s.model.n_head = model.integer("n_head", 1, kMaxDimension);
  s.model.n_embd = model.integer("n_embd", 1, kMaxDimension);
  s.model.seq_len = model.integer("seq_len", 1, kMaxDimension);
  s.model.vocab_size = model.integer("vocab_size", 1, kMaxDimension);
  // Optional: GPT-2 checkpoints written before the llama family existed.
  if (model.contains("family")) {
    const std::string family = model.string("family");
    if (family != "gpt2" && family != "llama") {
      model.fail("family", "must be \"gpt2\" or \"llama\", got " + sdk::describe(model.value("family")));
    }
    s.model.family = family == "llama" ? model::ModelFamily::llama : model::ModelFamily::gpt2;
  }
  if (s.model.family == model::ModelFamily::llama) {
    s.model.n_kv_head = model.integer("n_kv_head", 1, s.model.n_head);
    if (s.model.n_head % s.model.n_kv_head != 0) model.fail("n_kv_head", "must divide n_head");
    s.model.ffn_size = model.integer("ffn_size", 1, kMaxDimension);
    s.model.rope_theta = model.positive_finite("rope_theta");
    if (model.contains("qkv_bias")) s.model.qkv_bias = model.boolean("qkv_bias");
    if (model.contains("head_dim")) {
      s.model.head_dim = model.integer("head_dim", 2, kMaxDimension);
      if (s.model.head_dim % 2 != 0) model.fail("head_dim", "must be even (rotary positions)");
    }
    if (model.contains("tie_embeddings")) s.model.tie_embeddings = model.boolean("tie_embeddings");
    if (model.contains("qk_norm")) s.model.qk_norm = model.boolean("qk_norm");
    if (model.contains("sliding_window")) s.model.sliding_window = model.integer("sliding_window", 1, kMaxDimension);
    if (model.contains("rope_scaling")) {
      // Written resolved (rope_json.h): every parameter present.
      const JsonFields r = model.object("rope_scaling");
      const std::string type = r.string("rope_type");
      if (type == "default") r.fail("rope_type", "must name a scaling (absent: the default embedding)");
      const int64_t original =
          type == "linear" ? 1 : r.integer("original_max_position_embeddings", 1, kMaxDimension);
      s.model.rope_scaling = read_rope_scaling(r, type, original, std::nullopt, {"rope_type"});
    }
    if (model.contains("nope_layers")) s.model.nope_layers = model.integer_array("nope_layers", 0, s.model.n_layer - 1);
    for (const auto& [key, value, none] : kModelScalars) {
      if (model.contains(key)) s.model.*value = model.number(key, 0.0, 1e30);
    }
    if (model.contains("partial_rotary_factor")) {
      s.model.partial_rotary_factor = model.number("partial_rotary_factor", 0.0, 1.0);
      if (s.model.partial_rotary_factor <= 0.0) model.fail("partial_rotary_factor", "must lie in (0, 1]");
    }
    if (model.contains("block")) {
      s.model.block = read_block_choices(model.object("block"));
      const auto layers = static_cast<int64_t>(s.model.block.sliding_layers.size());
      if (layers != 0 && layers != s.model.n_layer) model.fail("block", "names sliding_layers for another n_layer");
    }
    // Optional: files written before the mixture of experts existed are dense.
    if (model.contains("n_experts")) s.model.n_experts = model.integer("n_experts", 0, kMaxDimension);
    if (s.model.n_experts > 0) {
      s.model.experts_per_token = model.integer("experts_per_token", 1, s.model.n_experts);
      // Optional: files written before the shared expert existed have none.
      if (model.contains("shared_expert_size")) {
        s.model.shared_expert_size = model.integer("shared_expert_size", 0, kMaxDimension);
      }
      if (model.contains("normalize_top_k")) s.model.normalize_top_k = model.boolean("normalize_top_k");
    } else if (model.contains("experts_per_token") && model.integer("experts_per_token", 0, 0) != 0) {
      model.fail("experts_per_token", "must be 0 without experts");
    }
  } else {
    // GPT-2 has none of these: 0 when present ("must be at most 0").
    for (const char* key : {"head_dim", "tie_embeddings", "qk_norm", "sliding_window", "rope_scaling",
                            "partial_rotary_factor", "nope_layers", "embedding_multiplier", "residual_multiplier",
                            "logits_scaling", "attention_multiplier", "query_position_scale_beta", "block"}) {
      if (model.contains(key)) model.fail(key, "belongs to the llama family; this is a GPT-2");
    }
    for (const char* key : {"n_kv_head", "n_experts", "experts_per_token"}) {
      if (model.contains(key)) model.integer(key, 0, 0);
    }
  }
  if (model.contains("norm_eps")) s.model.norm_eps = model.positive_finite("norm_eps");

  // Optional: files written before these fields existed.
  if (top.contains("plugins")) {
    s.plugins = top.string("plugins");
    check_plugin_list(top, s.plugins);
  }
  if (top.contains("world_size")) s.world_size = static_cast<int32_t>(top.integer("world_size", 1, kMaxWorldSize));
  if (top.contains("hf_config")) {
    // A coefficient as --moe-aux-loss-coef takes it (finite, >= 0), a width as the model's.
    const JsonFields hf = top.object("hf_config");
    hf.only({"router_aux_loss_coef", "intermediate_size", "model_type"});
    s.hf.router_aux_loss_coef = hf.optional_number("router_aux_loss_coef", 0.0);
    s.hf.intermediate_size = hf.optional_integer("intermediate_size", 1, kMaxDimension);
    s.hf.model_type = hf.optional_string("model_type");
  }
  return s;
}

TrainerState parse_trainer_state(std::string_view text, const std::string& where) {
  return read_checkpoint_json([&] { return read_fields(sdk::parse_json(text, "'" + where + "'"), where); });
}

TrainerState read_trainer_state(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / kTrainerStateFile;
  return parse_trainer_state(read_regular_file(path, kMaxTrainerStateBytes), path.string());
}

}  // namespace accel::checkpoint
