// Hugging Face GPT-2 checkpoints in and out (see hf_checkpoint.h).
#include "host/checkpoint/hf_checkpoint.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "host/model/gpt.h"
#include "host/util/strformat.h"

namespace accel::checkpoint {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kPrefix = "transformer.";
// config.json and the shard index are small; anything far larger is not one.
constexpr std::uintmax_t kMaxJsonBytes = 64ull << 20;

json read_json(const fs::path& path) {
  std::error_code error;
  const std::uintmax_t size = fs::file_size(path, error);
  if (error) throw CheckpointError(path.string() + ": cannot read: " + error.message());
  if (size > kMaxJsonBytes) throw CheckpointError(path.string() + ": larger than any config (" + std::to_string(size) + " bytes)");
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) throw CheckpointError(path.string() + ": cannot read");
  try {
    return json::parse(text.str());
  } catch (const json::exception& e) {
    throw CheckpointError(path.string() + ": not valid JSON (" + e.what() + ")");
  }
}

// A key's value when present and not null; its type checked.
template <typename T>
std::optional<T> optional_key(const json& config, const fs::path& path, const char* key) {
  const auto found = config.find(key);
  if (found == config.end() || found->is_null()) return std::nullopt;
  try {
    return found->get<T>();
  } catch (const json::exception&) {
    throw CheckpointError(path.string() + ": \"" + key + "\" has the wrong type (" + found->dump() + ")");
  }
}

int64_t positive_key(const json& config, const fs::path& path, const char* key) {
  const std::optional<int64_t> value = optional_key<int64_t>(config, path, key);
  if (!value) throw CheckpointError(path.string() + ": \"" + std::string(key) + "\" is missing");
  if (*value <= 0) throw CheckpointError(path.string() + ": \"" + std::string(key) + "\" must be positive, got " + std::to_string(*value));
  return *value;
}

// Refuses `key` unless it is absent or equals `expected` (what the host's
// GPT-2 computes), naming both.
template <typename T>
void require_key(const json& config, const fs::path& path, const char* key, const T& expected, const char* why) {
  const std::optional<T> value = optional_key<T>(config, path, key);
  if (value && *value != expected) {
    throw CheckpointError(path.string() + ": \"" + key + "\" is " + json(*value).dump() + "; accel-host's GPT-2 " + why);
  }
}

// Block projections are Conv1D ([in, out]) in transformers.
bool is_conv1d(const std::string& host_name) {
  for (const char* suffix : {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"}) {
    const std::string s(suffix);
    if (host_name.size() > s.size() && host_name.compare(host_name.size() - s.size(), s.size(), s) == 0) return true;
  }
  return false;
}

// Buffers transformers wrote into older GPT-2 files: the causal mask and
// its fill value, recomputed by every implementation.
bool is_mask_buffer(const std::string& host_name) {
  for (const std::string s : {".attn.bias", ".attn.masked_bias"}) {
    if (host_name.size() > s.size() && host_name.compare(host_name.size() - s.size(), s.size(), s) == 0 &&
        host_name.rfind("h.", 0) == 0) {
      return true;
    }
  }
  return false;
}

at::ScalarType torch_type(DType dtype, const std::string& where) {
  switch (dtype) {
    case DType::F32: return at::kFloat;
    case DType::F16: return at::kHalf;
    case DType::BF16: return at::kBFloat16;
    case DType::F64: return at::kDouble;
    default:
      throw CheckpointError(where + ": dtype " + std::string(dtype_name(dtype)) + " is not a floating weight type");
  }
}

at::Tensor read_tensor(const SafetensorsFile& file, const TensorInfo& info) {
  const std::string where = file.path().string() + ": " + info.name;
  at::Tensor raw = at::empty(info.shape, at::TensorOptions().dtype(torch_type(info.dtype, where)));
  file.read(info, raw.data_ptr(), info.nbytes());
  return raw.to(at::kFloat).contiguous();
}

// The files holding the weights: the one model.safetensors, or every shard
// the index names (each once).
std::vector<fs::path> weight_files(const fs::path& dir) {
  const fs::path single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
  if (fs::exists(single)) return {single};
  if (!fs::exists(index)) {
    throw CheckpointError(dir.string() + ": holds neither model.safetensors nor model.safetensors.index.json "
                          "(save the model with safe_serialization=True)");
  }
  const json map = read_json(index);
  const auto weights = map.find("weight_map");
  if (weights == map.end() || !weights->is_object()) throw CheckpointError(index.string() + ": \"weight_map\" is missing");
  std::set<std::string> names;
  for (const auto& [tensor, file] : weights->items()) {
    if (!file.is_string()) throw CheckpointError(index.string() + ": the file of " + tensor + " is not a string");
    const std::string name = file.get<std::string>();
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
      throw CheckpointError(index.string() + ": shard name '" + name + "' is not a file name in " + dir.string());
    }
    names.insert(name);
  }
  std::vector<fs::path> files;
  for (const std::string& name : names) files.push_back(dir / name);
  return files;
}

}  // namespace

HfGpt2Config read_hf_gpt2_config(const fs::path& dir) {
  const fs::path path = dir / "config.json";
  if (!fs::is_directory(dir)) throw CheckpointError("--init-from hf:" + dir.string() + ": not a directory");
  if (!fs::exists(path)) throw CheckpointError(dir.string() + ": no config.json (a transformers save_pretrained directory has one)");
  const json config = read_json(path);
  if (!config.is_object()) throw CheckpointError(path.string() + ": not a JSON object");
  const std::optional<std::string> type = optional_key<std::string>(config, path, "model_type");
  if (type != "gpt2") {
    throw CheckpointError(path.string() + ": model_type " + (type ? "'" + *type + "'" : std::string("missing")) +
                          " is not supported (supported: gpt2)");
  }
  if (const auto archs = optional_key<std::vector<std::string>>(config, path, "architectures")) {
    for (const std::string& a : *archs) {
      if (a != "GPT2LMHeadModel" && a != "GPT2Model") {
        throw CheckpointError(path.string() + ": architecture " + a + " is not supported (supported: GPT2LMHeadModel)");
      }
    }
  }
  HfGpt2Config out;
  out.shape.vocab_size = positive_key(config, path, "vocab_size");
  out.shape.seq_len = positive_key(config, path, "n_positions");
  out.shape.n_embd = positive_key(config, path, "n_embd");
  out.shape.n_layer = positive_key(config, path, "n_layer");
  out.shape.n_head = positive_key(config, path, "n_head");
  const std::optional<std::string> activation = optional_key<std::string>(config, path, "activation_function");
  if (activation && *activation != "gelu_new" && *activation != "gelu_pytorch_tanh") {
    throw CheckpointError(path.string() + ": \"activation_function\" is \"" + *activation +
                          "\"; accel-host's GPT-2 uses the tanh GELU (gelu_new)");
  }
  require_key<double>(config, path, "layer_norm_epsilon", 1e-5, "normalises with epsilon 1e-05");
  if (const auto inner = optional_key<int64_t>(config, path, "n_inner"); inner && *inner != 4 * out.shape.n_embd) {
    throw CheckpointError(path.string() + ": \"n_inner\" is " + std::to_string(*inner) +
                          "; accel-host's GPT-2 MLP is 4 * n_embd = " + std::to_string(4 * out.shape.n_embd) + " wide");
  }
  require_key<bool>(config, path, "scale_attn_weights", true, "scales attention scores by 1/sqrt(head size)");
  require_key<bool>(config, path, "scale_attn_by_inverse_layer_idx", false, "does not scale by the layer index");
  require_key<bool>(config, path, "reorder_and_upcast_attn", false, "computes attention in the weights' dtype");
  require_key<bool>(config, path, "add_cross_attention", false, "is a decoder without cross-attention");
  require_key<bool>(config, path, "tie_word_embeddings", true, "ties the head to wte");
  for (const char* key : {"resid_pdrop", "embd_pdrop", "attn_pdrop"}) {
    const std::optional<double> rate = optional_key<double>(config, path, key);
    if (rate && *rate != 0.0) out.ignored.push_back(strformat("%s %g (accel-host trains without dropout)", key, *rate));
  }
  try {
    out.shape = model::make_gpt_config("gpt-tiny", ModelOverrides{out.shape.n_layer, out.shape.n_head,
                                                                  out.shape.n_embd, out.shape.seq_len,
                                                                  out.shape.vocab_size});
  } catch (const std::invalid_argument& e) {
    throw CheckpointError(path.string() + ": " + e.what());
  }
  return out;
}

model::NamedWeights read_hf_gpt2_weights(const fs::path& dir, const model::GptConfig& shape) {
  std::map<std::string, std::vector<int64_t>> expected;  // host name -> host shape
  const model::GptModel layout(shape, at::kCPU, /*allocate=*/false);
  for (const model::Unit& unit : layout.units()) {
    for (const model::Param& p : unit.params()) expected[p.spec.name] = p.spec.shape;
  }
  model::NamedWeights weights;
  std::optional<std::pair<fs::path, at::Tensor>> lm_head;
  for (const fs::path& path : weight_files(dir)) {
    const SafetensorsFile file = SafetensorsFile::open(path);
    for (const TensorInfo& info : file.tensors()) {
      if (info.name == "lm_head.weight") {
        lm_head.emplace(path, read_tensor(file, info));
        continue;
      }
      const std::string host_name =
          info.name.rfind(kPrefix, 0) == 0 ? info.name.substr(std::string(kPrefix).size()) : info.name;
      if (is_mask_buffer(host_name)) continue;
      const auto want = expected.find(host_name);
      if (want == expected.end()) {
        throw CheckpointError(path.string() + ": tensor " + info.name + " is not part of a GPT-2 of " + shape.describe());
      }
      std::vector<int64_t> stored = want->second;
      if (is_conv1d(host_name)) std::swap(stored[0], stored[1]);
      if (info.shape != stored) {
        throw CheckpointError(path.string() + ": " + info.name + " is " + c10::str(at::IntArrayRef(info.shape)) +
                              ", the model (" + shape.describe() + ") needs " + c10::str(at::IntArrayRef(stored)));
      }
      if (weights.count(host_name) != 0) throw CheckpointError(path.string() + ": " + info.name + " is stored twice");
      at::Tensor value = read_tensor(file, info);
      weights[host_name] = is_conv1d(host_name) ? value.t().contiguous() : value;
    }
  }
  for (const auto& [name, unused] : expected) {
    if (weights.count(name) == 0) throw CheckpointError(dir.string() + ": the weights have no " + kPrefix + name);
  }
  if (lm_head) {
    const at::Tensor& wte = weights.at("wte.weight");
    if (lm_head->second.sizes() != wte.sizes() || !at::equal(lm_head->second, wte)) {
      throw CheckpointError(lm_head->first.string() + ": lm_head.weight differs from wte.weight; accel-host's GPT-2 "
                            "ties the head to the token embedding");
    }
  }
  return weights;
}

std::vector<std::pair<std::string, at::Tensor>> to_hf_gpt2_tensors(
    const std::vector<std::pair<std::string, at::Tensor>>& host_tensors) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  out.reserve(host_tensors.size());
  for (const auto& [name, tensor] : host_tensors) {
    const bool known = name == "wte.weight" || name == "wpe.weight" || name.rfind("ln_f.", 0) == 0 ||
                       name.rfind("h.", 0) == 0;
    if (!known) throw CheckpointError("export-hf: tensor " + name + " is not part of GPT-2");
    const at::Tensor value = tensor.to(at::kFloat);
    out.emplace_back(kPrefix + name, is_conv1d(name) ? value.t().contiguous() : value.contiguous());
  }
  return out;
}

std::string hf_gpt2_config_json(const model::GptConfig& shape) {
  const json config = {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"vocab_size", shape.vocab_size},
      {"n_positions", shape.seq_len},
      {"n_embd", shape.n_embd},
      {"n_layer", shape.n_layer},
      {"n_head", shape.n_head},
      {"n_inner", nullptr},
      {"activation_function", "gelu_new"},
      {"layer_norm_epsilon", 1e-5},
      {"initializer_range", 0.02},
      {"resid_pdrop", 0.0},
      {"embd_pdrop", 0.0},
      {"attn_pdrop", 0.0},
      {"scale_attn_weights", true},
      {"scale_attn_by_inverse_layer_idx", false},
      {"reorder_and_upcast_attn", false},
      {"tie_word_embeddings", true},
      {"use_cache", true},
      {"dtype", "float32"},
  };
  return config.dump(2) + "\n";
}

}  // namespace accel::checkpoint
