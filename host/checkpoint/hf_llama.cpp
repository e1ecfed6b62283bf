// Hugging Face rotary-decoder checkpoints in and out (see hf_checkpoint.h):
// Llama's, and Qwen2's, Qwen3's and Mistral's, named alike (Qwen2 adds q, k
// and v biases, Qwen3 self_attn.q_norm / k_norm).
//
// The host names Llama's parameters as transformers does, without the
// "model." prefix (lm_head.weight has none in either), and keeps every
// projection as torch.nn.Linear's [out, in]: the mapping is the prefix
// only. config.json is read and written by hf_config.cpp.
#include <nlohmann/json.hpp>

#include <cmath>
#include <map>
#include <optional>

#include "host/checkpoint/hf_bridge.h"
#include "host/checkpoint/hf_checkpoint.h"
#include "host/checkpoint/hf_files.h"
#include "host/model/gpt.h"
#include "host/util/strformat.h"

namespace accel::checkpoint {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kPrefix = "model.";

std::string hf_name(const std::string& host_name) {
  return host_name == "lm_head.weight" ? host_name : kPrefix + host_name;
}

}  // namespace

std::shared_ptr<const HfWeightSource> read_hf_llama_weights(const fs::path& dir, const model::GptConfig& shape) {
  std::map<std::string, std::pair<std::string, std::vector<int64_t>>> expected;  // hf name -> host name, shape
  const model::GptModel layout(shape, at::kCPU, /*allocate=*/false);
  for (const model::Unit& unit : layout.units()) {
    for (const model::Param& p : unit.params()) expected[hf_name(p.spec.name)] = {p.spec.name, p.spec.shape};
  }
  // Headers only; values are read block by block later (hf_weight_source.h).
  auto weights = std::make_shared<HfWeightSource>("hf:" + dir.string());
  std::optional<std::pair<size_t, TensorInfo>> tied_head;  // file index, tensor
  const char* family = hf_bridge_for(shape).display_name;
  for (const fs::path& path : hf::weight_files(dir)) {
    const size_t index = weights->add_file(SafetensorsFile::open(path));
    for (const TensorInfo& info : weights->file(index).tensors()) {
      if (info.name.ends_with(".rotary_emb.inv_freq")) {
        continue;  // a buffer older files hold; recomputed from rope_theta
      }
      if (shape.tie_embeddings && info.name == "lm_head.weight") {
        tied_head.emplace(index, info);  // checked against embed_tokens below
        continue;
      }
      const auto want = expected.find(info.name);
      if (want == expected.end()) {
        throw CheckpointError(path.string() + ": tensor " + info.name + " is not part of a " + family + " of " +
                              shape.describe());
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
  if (tied_head) {
    // Compared a chunk at a time: the tie check holds neither tensor whole.
    const auto& [index, info] = *tied_head;
    if (!weights->holds_same_values(index, info, "embed_tokens.weight")) {
      throw CheckpointError(weights->file(index).path().string() + ": lm_head.weight differs from "
                            "model.embed_tokens.weight, but config.json ties them (tie_word_embeddings)");
    }
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

}  // namespace accel::checkpoint
