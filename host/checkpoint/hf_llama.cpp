// Hugging Face rotary-decoder checkpoints in and out (see hf_checkpoint.h):
// Llama's, and Qwen2's, Qwen3's and Mistral's, named alike (Qwen2 adds q, k
// and v biases, Qwen3 self_attn.q_norm / k_norm), and Phi-3's, whose q, k
// and v are one qkv_proj and gate and up one gate_up_proj on disk.
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

// Phi-3's fused projections: the host's parameters whose rows, in this
// order, make one tensor on disk (qkv_proj: q, k, v; gate_up_proj: gate, up).
struct FusedProjection {
  const char* fused;
  std::vector<const char*> parts;
};
const std::vector<FusedProjection>& fused_projections() {
  static const std::vector<FusedProjection> table = {
      {"self_attn.qkv_proj.weight", {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"}},
      {"mlp.gate_up_proj.weight", {"mlp.gate_proj.weight", "mlp.up_proj.weight"}}};
  return table;
}

// "layers.N.<part>" -> ("layers.N.<fused>", its position) when <part> is
// one of a fused projection's parts; nullopt otherwise.
std::optional<std::pair<std::string, size_t>> fused_name(const std::string& host_name) {
  for (const FusedProjection& projection : fused_projections()) {
    for (size_t i = 0; i < projection.parts.size(); ++i) {
      const std::string part = std::string(".") + projection.parts[i];
      if (host_name.rfind("layers.", 0) == 0 && host_name.ends_with(part)) {
        return std::make_pair(host_name.substr(0, host_name.size() - part.size() + 1) + projection.fused, i);
      }
    }
  }
  return std::nullopt;
}

// What the reader expects of one stored tensor: its shape and the host's
// parameters it holds, each from row `row0` on (one, from row 0, unless fused).
struct Stored {
  std::vector<int64_t> shape;
  struct Part {
    std::string host_name;
    std::vector<int64_t> shape;
    int64_t row0;
  };
  std::vector<Part> parts;
};

std::map<std::string, Stored> expected_tensors(const model::GptConfig& shape, bool fused) {
  std::map<std::string, Stored> expected;  // hf name -> what it holds
  const model::GptModel layout(shape, at::kCPU, /*allocate=*/false);
  for (const model::Unit& unit : layout.units()) {
    for (const model::Param& p : unit.params()) {
      const auto joined = fused ? fused_name(p.spec.name) : std::nullopt;
      if (!joined) {
        expected[hf_name(p.spec.name)] = Stored{p.spec.shape, {{p.spec.name, p.spec.shape, 0}}};
        continue;
      }
      // The parts come in the unit's order (q, k, v; gate, up): rows stack.
      Stored& stored = expected[hf_name(joined->first)];
      const int64_t row0 = stored.shape.empty() ? 0 : stored.shape[0];
      stored.shape = {row0 + p.spec.shape[0], p.spec.shape[1]};
      stored.parts.push_back({p.spec.name, p.spec.shape, row0});
    }
  }
  return expected;
}

}  // namespace

std::shared_ptr<const HfWeightSource> read_hf_llama_weights(const fs::path& dir, const model::GptConfig& shape,
                                                            bool fused) {
  const std::map<std::string, Stored> expected = expected_tensors(shape, fused);
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
      const Stored& stored = want->second;
      if (info.shape != stored.shape) {
        throw CheckpointError(path.string() + ": " + info.name + " is " + c10::str(at::IntArrayRef(info.shape)) +
                              ", the model (" + shape.describe() + ") needs " + c10::str(at::IntArrayRef(stored.shape)));
      }
      if (weights->contains(stored.parts.front().host_name)) {
        throw CheckpointError(path.string() + ": " + info.name + " is stored twice");
      }
      if (stored.parts.size() == 1) {
        weights->add(stored.parts.front().host_name, index, info, stored.shape, /*transposed=*/false);
        continue;
      }
      for (const Stored::Part& part : stored.parts) weights->add_rows(part.host_name, index, info, part.row0, part.shape);
    }
  }
  for (const auto& [name, stored] : expected) {
    if (!weights->contains(stored.parts.front().host_name)) {
      throw CheckpointError(dir.string() + ": the weights have no " + name);
    }
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
    const std::vector<std::pair<std::string, at::Tensor>>& host_tensors, bool fused) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  out.reserve(host_tensors.size());
  // A fused tensor is written where its first part came, its parts' rows
  // joined in the projection's order (q, k, v; gate, up) once all are in.
  std::map<std::string, std::pair<size_t, std::vector<at::Tensor>>> joining;  // fused name -> slot, parts
  for (const auto& [name, tensor] : host_tensors) {
    const bool known = name == "embed_tokens.weight" || name == "norm.weight" || name == "lm_head.weight" ||
                       name.rfind("layers.", 0) == 0;
    if (!known) throw CheckpointError("export-hf: tensor " + name + " is not part of Llama");
    const auto joined = fused ? fused_name(name) : std::nullopt;
    if (!joined) {
      out.emplace_back(hf_name(name), tensor.to(at::kFloat).contiguous());
      continue;
    }
    auto [slot, inserted] = joining.try_emplace(joined->first, out.size(), std::vector<at::Tensor>(3));
    if (inserted) out.emplace_back(hf_name(joined->first), at::Tensor());
    slot->second.second.at(joined->second) = tensor.to(at::kFloat);
  }
  for (auto& [fused_name, slot] : joining) {
    std::vector<at::Tensor> parts;
    for (const at::Tensor& part : slot.second) {
      if (part.defined()) parts.push_back(part);
    }
    const size_t expected = fused_name.ends_with("qkv_proj.weight") ? 3 : 2;
    if (parts.size() != expected) throw CheckpointError("export-hf: " + fused_name + " misses one of its parts");
    out[slot.first].second = at::cat(parts, 0).contiguous();
  }
  return out;
}

}  // namespace accel::checkpoint
