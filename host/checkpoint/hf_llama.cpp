// Hugging Face Llama checkpoints in and out (see hf_checkpoint.h).
//
// The host names Llama's parameters as transformers does, without the
// "model." prefix (lm_head.weight has none in either), and keeps every
// projection as torch.nn.Linear's [out, in]: the mapping is the prefix
// only. config.json keys the host's Llama cannot honour (rope scaling
// variants, biases, a tied head, an activation other than SiLU, a head
// width other than hidden_size / heads) are refused by name.
#include <nlohmann/json.hpp>

#include <cmath>
#include <map>
#include <optional>

#include "host/checkpoint/hf_checkpoint.h"
#include "host/checkpoint/hf_files.h"
#include "host/model/gpt.h"
#include "host/util/strformat.h"

namespace accel::checkpoint {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using hf::optional_key;
using hf::positive_key;

constexpr const char* kPrefix = "model.";

std::string hf_name(const std::string& host_name) {
  return host_name == "lm_head.weight" ? host_name : kPrefix + host_name;
}

// Refuses `key` unless absent or `expected`, naming both.
template <typename T>
void require_key(const json& config, const fs::path& path, const char* key, const T& expected, const char* why) {
  const std::optional<T> value = optional_key<T>(config, path, key);
  if (value && *value != expected) {
    throw CheckpointError(path.string() + ": \"" + key + "\" is " + json(*value).dump() + "; accel-host's Llama " + why);
  }
}

// rope_theta from transformers 5's "rope_parameters" or 4's "rope_theta" /
// "rope_scaling"; only the default (unscaled) rotary embedding is built.
double rope_theta(const json& config, const fs::path& path) {
  double theta = optional_key<double>(config, path, "rope_theta").value_or(10000.0);
  if (const auto params = config.find("rope_parameters"); params != config.end() && !params->is_null()) {
    if (!params->is_object()) throw CheckpointError(path.string() + ": \"rope_parameters\" is not an object");
    const auto type = optional_key<std::string>(*params, path, "rope_type");
    if (type && *type != "default") {
      throw CheckpointError(path.string() + ": rope_parameters.rope_type is \"" + *type +
                            "\"; accel-host's Llama builds the default rotary embedding only");
    }
    for (const auto& [key, value] : params->items()) {
      if (key != "rope_type" && key != "rope_theta") {
        throw CheckpointError(path.string() + ": rope_parameters." + key + " is not supported (default rotary "
                              "embedding only)");
      }
    }
    theta = optional_key<double>(*params, path, "rope_theta").value_or(theta);
  }
  if (const auto scaling = config.find("rope_scaling"); scaling != config.end() && !scaling->is_null()) {
    throw CheckpointError(path.string() + ": \"rope_scaling\" " + scaling->dump() +
                          " is not supported (accel-host's Llama builds the default rotary embedding only)");
  }
  if (!(theta > 0.0) || !std::isfinite(theta)) throw CheckpointError(path.string() + ": rope_theta must be positive");
  return theta;
}

}  // namespace

HfModelConfig read_hf_llama_config(const fs::path& path, const json& config) {
  if (const auto archs = optional_key<std::vector<std::string>>(config, path, "architectures")) {
    for (const std::string& a : *archs) {
      if (a != "LlamaForCausalLM" && a != "LlamaModel") {
        throw CheckpointError(path.string() + ": architecture " + a + " is not supported (supported: LlamaForCausalLM)");
      }
    }
  }
  ModelOverrides o;
  o.vocab_size = positive_key(config, path, "vocab_size");
  o.seq_len = positive_key(config, path, "max_position_embeddings");
  o.n_embd = positive_key(config, path, "hidden_size");
  o.n_layer = positive_key(config, path, "num_hidden_layers");
  o.n_head = positive_key(config, path, "num_attention_heads");
  o.n_kv_head = optional_key<int64_t>(config, path, "num_key_value_heads").value_or(*o.n_head);
  o.ffn_size = positive_key(config, path, "intermediate_size");
  o.rope_theta = rope_theta(config, path);
  o.norm_eps = optional_key<double>(config, path, "rms_norm_eps").value_or(1e-6);
  if (const auto head_dim = optional_key<int64_t>(config, path, "head_dim"); head_dim && *head_dim * *o.n_head != *o.n_embd) {
    throw CheckpointError(path.string() + ": \"head_dim\" is " + std::to_string(*head_dim) +
                          "; accel-host's Llama uses hidden_size / num_attention_heads = " +
                          std::to_string(*o.n_embd / *o.n_head));
  }
  const std::optional<std::string> activation = optional_key<std::string>(config, path, "hidden_act");
  if (activation && *activation != "silu") {
    throw CheckpointError(path.string() + ": \"hidden_act\" is \"" + *activation + "\"; accel-host's Llama uses silu");
  }
  require_key<bool>(config, path, "attention_bias", false, "has no attention biases");
  require_key<bool>(config, path, "mlp_bias", false, "has no MLP biases");
  require_key<bool>(config, path, "tie_word_embeddings", false, "keeps an untied lm_head");
  require_key<int64_t>(config, path, "pretraining_tp", 1, "computes the projections whole (pretraining_tp 1)");
  HfModelConfig out;
  const std::optional<double> dropout = optional_key<double>(config, path, "attention_dropout");
  if (dropout && *dropout != 0.0) out.ignored.push_back(strformat("attention_dropout %g (accel-host trains without dropout)", *dropout));
  try {
    out.shape = model::make_gpt_config("llama-tiny", o);
  } catch (const std::invalid_argument& e) {
    throw CheckpointError(path.string() + ": " + e.what());
  }
  return out;
}

std::shared_ptr<const HfWeightSource> read_hf_llama_weights(const fs::path& dir, const model::GptConfig& shape) {
  std::map<std::string, std::pair<std::string, std::vector<int64_t>>> expected;  // hf name -> host name, shape
  const model::GptModel layout(shape, at::kCPU, /*allocate=*/false);
  for (const model::Unit& unit : layout.units()) {
    for (const model::Param& p : unit.params()) expected[hf_name(p.spec.name)] = {p.spec.name, p.spec.shape};
  }
  // Headers only; values are read block by block later (hf_weight_source.h).
  auto weights = std::make_shared<HfWeightSource>("hf:" + dir.string());
  for (const fs::path& path : hf::weight_files(dir)) {
    const size_t index = weights->add_file(SafetensorsFile::open(path));
    for (const TensorInfo& info : weights->file(index).tensors()) {
      if (info.name.ends_with(".rotary_emb.inv_freq")) {
        continue;  // a buffer older files hold; recomputed from rope_theta
      }
      const auto want = expected.find(info.name);
      if (want == expected.end()) {
        throw CheckpointError(path.string() + ": tensor " + info.name + " is not part of a Llama of " + shape.describe());
      }
      const auto& [host_name, host_shape] = want->second;
      if (info.shape != host_shape) {
        throw CheckpointError(path.string() + ": " + info.name + " is " + c10::str(at::IntArrayRef(info.shape)) +
                              ", the model (" + shape.describe() + ") needs " + c10::str(at::IntArrayRef(host_shape)));
      }
      if (weights->contains(host_name)) throw CheckpointError(path.string() + ": " + info.name + " is stored twice");
      weights->add(host_name, index, info, host_shape, /*transposed=*/false);
    }
  }
  for (const auto& [name, host] : expected) {
    if (!weights->contains(host.first)) throw CheckpointError(dir.string() + ": the weights have no " + name);
  }
  return weights;
}

std::vector<std::pair<std::string, at::Tensor>> to_hf_llama_tensors(
    const std::vector<std::pair<std::string, at::Tensor>>& host_tensors) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  out.reserve(host_tensors.size());
  for (const auto& [name, tensor] : host_tensors) {
    const bool known = name == "embed_tokens.weight" || name == "norm.weight" || name == "lm_head.weight" ||
                       name.rfind("layers.", 0) == 0;
    if (!known) throw CheckpointError("export-hf: tensor " + name + " is not part of Llama");
    out.emplace_back(hf_name(name), tensor.to(at::kFloat).contiguous());
  }
  return out;
}

std::string hf_llama_config_json(const model::GptConfig& shape) {
  const json config = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"vocab_size", shape.vocab_size},
      {"max_position_embeddings", shape.seq_len},
      {"hidden_size", shape.n_embd},
      {"intermediate_size", shape.ffn_size},
      {"num_hidden_layers", shape.n_layer},
      {"num_attention_heads", shape.n_head},
      {"num_key_value_heads", shape.n_kv_head},
      {"head_dim", shape.n_embd / shape.n_head},
      {"hidden_act", "silu"},
      {"rms_norm_eps", shape.norm_eps},
      {"rope_parameters", {{"rope_theta", shape.rope_theta}, {"rope_type", "default"}}},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"mlp_bias", false},
      {"pretraining_tp", 1},
      {"tie_word_embeddings", false},
      {"initializer_range", 0.02},
      {"use_cache", true},
      {"bos_token_id", nullptr},
      {"eos_token_id", nullptr},
      {"pad_token_id", nullptr},
      {"dtype", "float32"},
  };
  return config.dump(2) + "\n";
}

}  // namespace accel::checkpoint
