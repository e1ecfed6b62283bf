// Hugging Face GPT-2 checkpoints in and out (see hf_checkpoint.h).
#include "host/checkpoint/hf_checkpoint.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "host/checkpoint/hf_files.h"
#include "host/model/gpt.h"
#include "host/util/strformat.h"

namespace accel::checkpoint {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using hf::optional_key;
using hf::positive_key;
using hf::read_json;
using hf::weight_files;

constexpr const char* kPrefix = "transformer.";

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

}  // namespace

HfModelConfig read_hf_config(const fs::path& dir) {
  const fs::path path = dir / "config.json";
  if (!fs::is_directory(dir)) throw CheckpointError("--init-from hf:" + dir.string() + ": not a directory");
  if (!fs::exists(path)) throw CheckpointError(dir.string() + ": no config.json (a transformers save_pretrained directory has one)");
  const json config = read_json(path);
  if (!config.is_object()) throw CheckpointError(path.string() + ": not a JSON object");
  const std::optional<std::string> type = optional_key<std::string>(config, path, "model_type");
  if (type == "gpt2") return read_hf_gpt2_config(path, config);
  if (type == "llama") return read_hf_llama_config(path, config);
  throw CheckpointError(path.string() + ": model_type " + (type ? "'" + *type + "'" : std::string("missing")) +
                        " is not supported (supported: gpt2, llama)");
}

std::shared_ptr<const HfWeightSource> read_hf_weights(const fs::path& dir, const model::GptConfig& shape) {
  return shape.family == model::ModelFamily::llama ? read_hf_llama_weights(dir, shape) : read_hf_gpt2_weights(dir, shape);
}

std::vector<std::pair<std::string, at::Tensor>> to_hf_tensors(
    const std::vector<std::pair<std::string, at::Tensor>>& host_tensors, const model::GptConfig& shape) {
  return shape.family == model::ModelFamily::llama ? to_hf_llama_tensors(host_tensors) : to_hf_gpt2_tensors(host_tensors);
}

std::string hf_config_json(const model::GptConfig& shape) {
  return shape.family == model::ModelFamily::llama ? hf_llama_config_json(shape) : hf_gpt2_config_json(shape);
}

HfModelConfig read_hf_gpt2_config(const fs::path& path, const json& config) {
  if (const auto archs = optional_key<std::vector<std::string>>(config, path, "architectures")) {
    for (const std::string& a : *archs) {
      if (a != "GPT2LMHeadModel" && a != "GPT2Model") {
        throw CheckpointError(path.string() + ": architecture " + a + " is not supported (supported: GPT2LMHeadModel)");
      }
    }
  }
  HfModelConfig out;
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

std::shared_ptr<const HfWeightSource> read_hf_gpt2_weights(const fs::path& dir, const model::GptConfig& shape) {
  std::map<std::string, std::vector<int64_t>> expected;  // host name -> host shape
  const model::GptModel layout(shape, at::kCPU, /*allocate=*/false);
  for (const model::Unit& unit : layout.units()) {
    for (const model::Param& p : unit.params()) expected[p.spec.name] = p.spec.shape;
  }
  // Headers only: where each weight lies. Values are read when a unit or a
  // shard asks for them, each rank only its own (hf_weight_source.h).
  auto weights = std::make_shared<HfWeightSource>("hf:" + dir.string());
  std::optional<std::pair<size_t, TensorInfo>> lm_head;  // file index, tensor
  for (const fs::path& path : weight_files(dir)) {
    const size_t index = weights->add_file(SafetensorsFile::open(path));
    for (const TensorInfo& info : weights->file(index).tensors()) {
      if (info.name == "lm_head.weight") {
        lm_head.emplace(index, info);
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
      if (weights->contains(host_name)) throw CheckpointError(path.string() + ": " + info.name + " is stored twice");
      weights->add(host_name, index, info, want->second, is_conv1d(host_name));
    }
  }
  for (const auto& [name, unused] : expected) {
    if (!weights->contains(name)) throw CheckpointError(dir.string() + ": the weights have no " + kPrefix + name);
  }
  if (lm_head) {
    // Compared a chunk at a time: the tie check holds neither tensor whole.
    const auto& [index, info] = *lm_head;
    if (!weights->holds_same_values(index, info, "wte.weight")) {
      throw CheckpointError(weights->file(index).path().string() + ": lm_head.weight differs from wte.weight; "
                            "accel-host's GPT-2 ties the head to the token embedding");
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
