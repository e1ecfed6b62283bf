// Hugging Face GPT-2 checkpoints in and out, and the choice of reader by
// family (see hf_checkpoint.h).
#include "host/checkpoint/hf_checkpoint.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "host/checkpoint/hf_bridge.h"
#include "host/checkpoint/hf_files.h"
#include "host/model/gpt.h"
#include "host/util/strformat.h"

namespace accel::checkpoint {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using hf::weight_files;

constexpr const char* kPrefix = "transformer.";

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

// By how the shape's family names its tensors (hf_bridge.h); the families
// that share a naming share a reader.
std::shared_ptr<const HfWeightSource> read_hf_weights(const fs::path& dir, const model::GptConfig& shape,
                                                      const HfConfigKeys& keys) {
  switch (hf_bridge_for(shape, keys).weights) {
    case HfWeightNames::gpt2: return read_hf_gpt2_weights(dir, shape);
    case HfWeightNames::llama: return read_hf_llama_weights(dir, shape, /*fused=*/false);
    case HfWeightNames::phi3: return read_hf_llama_weights(dir, shape, /*fused=*/true);
    case HfWeightNames::mixtral:
    case HfWeightNames::qwen2_moe: return read_hf_moe_weights(dir, shape);
  }
  throw std::logic_error("read_hf_weights: unknown weight naming");
}

std::vector<std::pair<std::string, at::Tensor>> to_hf_tensors(
    const std::vector<std::pair<std::string, at::Tensor>>& host_tensors, const model::GptConfig& shape,
    const HfConfigKeys& keys) {
  switch (hf_bridge_for(shape, keys).weights) {
    case HfWeightNames::gpt2: return to_hf_gpt2_tensors(host_tensors);
    case HfWeightNames::llama: return to_hf_llama_tensors(host_tensors, /*fused=*/false);
    case HfWeightNames::phi3: return to_hf_llama_tensors(host_tensors, /*fused=*/true);
    case HfWeightNames::mixtral:
    case HfWeightNames::qwen2_moe: return to_hf_moe_tensors(host_tensors, shape);
  }
  throw std::logic_error("to_hf_tensors: unknown weight naming");
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

}  // namespace accel::checkpoint
