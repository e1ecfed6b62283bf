// Hugging Face mixtures of experts in and out (see hf_checkpoint.h):
// Mixtral's and Qwen2-MoE's.
//
// Everything outside the experts and the router maps as Llama's does (the
// "model." prefix; Qwen2-MoE's shared expert and its gate are named alike
// in both). The experts are one tensor per expert and projection on disk
// and two stacked parameters per block in the host; reading stacks them
// lazily (HfWeightSource::add_stacked reads only the block a rank asks
// for), writing splits them. The two families name the block and the
// projections differently (MoeDiskNames).
#include <map>
#include <optional>
#include <regex>

#include "host/checkpoint/hf_bridge.h"
#include "host/checkpoint/hf_checkpoint.h"
#include "host/checkpoint/hf_files.h"
#include "host/model/gpt.h"
#include "host/util/strformat.h"

namespace accel::checkpoint {
namespace {

namespace fs = std::filesystem;

// How a family stores a block's mixture of experts: the module holding the
// router ("gate") and the experts, and each expert's three projections.
struct MoeDiskNames {
  const char* family;  // in messages
  const char* block;
  const char* gate_proj;
  const char* up_proj;
  const char* down_proj;
};
constexpr MoeDiskNames kMixtral{"Mixtral", "block_sparse_moe.", "w1", "w3", "w2"};
constexpr MoeDiskNames kQwen2Moe{"Qwen2-MoE", "mlp.", "gate_proj", "up_proj", "down_proj"};

const MoeDiskNames& disk_names(const model::GptConfig& shape) {
  return hf_bridge_for(shape).weights == HfWeightNames::qwen2_moe ? kQwen2Moe : kMixtral;
}

std::string layer_prefix(const MoeDiskNames& names, int64_t layer) {
  return "model.layers." + std::to_string(layer) + "." + names.block;
}

std::string expert_name(const MoeDiskNames& names, int64_t layer, int64_t expert, const char* projection) {
  return layer_prefix(names, layer) + "experts." + std::to_string(expert) + "." + projection + ".weight";
}

// Whether an "mlp." part is the router or the experts (the rest of the MLP,
// a shared expert, maps by prefix).
bool routed_part(const std::string& part) { return part == "gate.weight" || part.rfind("experts.", 0) == 0; }

// "layers.N.mlp.<rest>" -> N and <rest>; nullopt for other names.
std::optional<std::pair<int64_t, std::string>> mlp_name(const std::string& host_name) {
  static const std::regex pattern(R"(layers\.(\d+)\.mlp\.(.+))");
  std::smatch match;
  if (!std::regex_match(host_name, match, pattern)) return std::nullopt;
  return std::make_pair(std::stoll(match[1].str()), match[2].str());
}

std::string llama_hf_name(const std::string& host_name) {
  return host_name == "lm_head.weight" ? host_name : "model." + host_name;
}

// One stored tensor the host needs: the parameter it belongs to, and where.
struct Wanted {
  std::string host_name;
  std::vector<int64_t> shape;  // stored shape
  int64_t row = -1;            // -1: the whole parameter; else its expert
  size_t slot = 0;             // position within that expert's row
};

}  // namespace

std::shared_ptr<const HfWeightSource> read_hf_moe_weights(const fs::path& dir, const model::GptConfig& shape) {
  const MoeDiskNames& names = disk_names(shape);
  const int64_t C = shape.n_embd, F = shape.ffn_size, E = shape.n_experts;
  std::map<std::string, Wanted> wanted;  // hf name -> what it is
  std::map<std::string, std::vector<int64_t>> stacked_shapes;
  const model::GptModel layout(shape, at::kCPU, /*allocate=*/false);
  for (const model::Unit& unit : layout.units()) {
    for (const model::Param& p : unit.params()) {
      const auto mlp = mlp_name(p.spec.name);
      if (!mlp || !routed_part(mlp->second)) {
        wanted[llama_hf_name(p.spec.name)] = Wanted{p.spec.name, p.spec.shape};
        continue;
      }
      const auto& [layer, part] = *mlp;
      if (part == "gate.weight") {
        wanted[layer_prefix(names, layer) + "gate.weight"] = Wanted{p.spec.name, p.spec.shape};
        continue;
      }
      stacked_shapes[p.spec.name] = p.spec.shape;
      for (int64_t e = 0; e < E; ++e) {
        if (part == "experts.gate_up_proj") {
          wanted[expert_name(names, layer, e, names.gate_proj)] = Wanted{p.spec.name, {F, C}, e, 0};
          wanted[expert_name(names, layer, e, names.up_proj)] = Wanted{p.spec.name, {F, C}, e, 1};
        } else {
          wanted[expert_name(names, layer, e, names.down_proj)] = Wanted{p.spec.name, {C, F}, e, 0};
        }
      }
    }
  }
  auto weights = std::make_shared<HfWeightSource>("hf:" + dir.string());
  // Per stacked parameter, per expert, its pieces in order.
  std::map<std::string, std::vector<std::vector<std::optional<HfWeightSource::Piece>>>> pieces;
  for (const auto& [name, host_shape] : stacked_shapes) {
    pieces[name].assign(static_cast<size_t>(E), std::vector<std::optional<HfWeightSource::Piece>>(
                                                    name.ends_with("gate_up_proj") ? 2 : 1));
  }
  for (const fs::path& path : hf::weight_files(dir)) {
    const size_t index = weights->add_file(SafetensorsFile::open(path));
    for (const TensorInfo& info : weights->file(index).tensors()) {
      if (info.name.ends_with(".rotary_emb.inv_freq")) continue;  // recomputed from rope_theta
      const auto want = wanted.find(info.name);
      if (want == wanted.end()) {
        throw CheckpointError(path.string() + ": tensor " + info.name + " is not part of a " + names.family +
                              " of " + shape.describe());
      }
      const Wanted& w = want->second;
      if (info.shape != w.shape) {
        throw CheckpointError(path.string() + ": " + info.name + " is " + c10::str(at::IntArrayRef(info.shape)) +
                              ", the model (" + shape.describe() + ") needs " + c10::str(at::IntArrayRef(w.shape)));
      }
      if (w.row < 0) {
        if (weights->contains(w.host_name)) throw CheckpointError(path.string() + ": " + info.name + " is stored twice");
        weights->add(w.host_name, index, info, w.shape, /*transposed=*/false);
        continue;
      }
      auto& slot = pieces[w.host_name][static_cast<size_t>(w.row)][w.slot];
      if (slot) throw CheckpointError(path.string() + ": " + info.name + " is stored twice");
      slot = HfWeightSource::Piece{index, info};
    }
  }
  for (const auto& [hf, w] : wanted) {
    const bool found = w.row < 0 ? weights->contains(w.host_name)
                                 : pieces[w.host_name][static_cast<size_t>(w.row)][w.slot].has_value();
    if (!found) throw CheckpointError(dir.string() + ": the weights have no " + hf);
  }
  for (const auto& [name, rows] : pieces) {
    std::vector<std::vector<HfWeightSource::Piece>> complete;
    for (const auto& row : rows) {
      complete.emplace_back();
      for (const auto& piece : row) complete.back().push_back(*piece);
    }
    weights->add_stacked(name, complete, stacked_shapes.at(name));
  }
  return weights;
}

std::vector<std::pair<std::string, at::Tensor>> to_hf_moe_tensors(
    const std::vector<std::pair<std::string, at::Tensor>>& host_tensors, const model::GptConfig& shape) {
  const MoeDiskNames& names = disk_names(shape);
  const int64_t F = shape.ffn_size;
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [name, tensor] : host_tensors) {
    const at::Tensor t = tensor.to(at::kFloat);
    const auto mlp = mlp_name(name);
    if (!mlp || !routed_part(mlp->second)) {
      const bool known = name == "embed_tokens.weight" || name == "norm.weight" || name == "lm_head.weight" ||
                         name.rfind("layers.", 0) == 0;
      if (!known) throw CheckpointError("export-hf: tensor " + name + " is not part of " + names.family);
      out.emplace_back(llama_hf_name(name), t.contiguous());
      continue;
    }
    const auto& [layer, part] = *mlp;
    if (part == "gate.weight") {
      out.emplace_back(layer_prefix(names, layer) + "gate.weight", t.contiguous());
    } else if (part == "experts.gate_up_proj") {
      for (int64_t e = 0; e < t.size(0); ++e) {
        out.emplace_back(expert_name(names, layer, e, names.gate_proj), t[e].narrow(0, 0, F).contiguous());
        out.emplace_back(expert_name(names, layer, e, names.up_proj), t[e].narrow(0, F, F).contiguous());
      }
    } else if (part == "experts.down_proj") {
      for (int64_t e = 0; e < t.size(0); ++e) {
        out.emplace_back(expert_name(names, layer, e, names.down_proj), t[e].contiguous());
      }
    } else {
      throw CheckpointError("export-hf: tensor " + name + " is not part of " + names.family);
    }
  }
  return out;
}

}  // namespace accel::checkpoint
