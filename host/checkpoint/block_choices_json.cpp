// trainer_state.json's "block" object (see block_choices_json.h).
#include "host/checkpoint/block_choices_json.h"

#include <string>

namespace accel::checkpoint {
namespace {

using json = nlohmann::json;

constexpr const char* kPlacements[] = {"pre", "sandwich", "post"};
constexpr const char* kActivations[] = {"silu", "gelu_tanh"};

}  // namespace

json block_choices_json(const BlockChoices& b) {
  json j = json::object();
  if (b.norm_placement != BlockChoices::NormPlacement::pre) {
    j["norm_placement"] = kPlacements[static_cast<int>(b.norm_placement)];
  }
  if (b.norm_plus_one) j["norm_plus_one"] = true;
  if (b.qk_norm_whole) j["qk_norm_whole"] = true;
  if (b.mlp_activation != BlockChoices::MlpActivation::silu) {
    j["mlp_activation"] = kActivations[static_cast<int>(b.mlp_activation)];
  }
  if (b.scale_embeddings) j["scale_embeddings"] = true;
  if (b.query_pre_attn_scalar > 0) j["query_pre_attn_scalar"] = b.query_pre_attn_scalar;
  if (b.attn_logit_softcap > 0) j["attn_logit_softcap"] = b.attn_logit_softcap;
  if (b.final_logit_softcap > 0) j["final_logit_softcap"] = b.final_logit_softcap;
  if (!b.sliding_layers.empty()) j["sliding_layers"] = b.sliding_layers;
  if (b.rope_local_theta > 0) j["rope_local_theta"] = b.rope_local_theta;
  return j;
}

BlockChoices read_block_choices(const sdk::JsonFields& f) {
  f.only({"norm_placement", "norm_plus_one", "qk_norm_whole", "mlp_activation", "scale_embeddings",
          "query_pre_attn_scalar", "attn_logit_softcap", "final_logit_softcap", "sliding_layers",
          "rope_local_theta"});
  BlockChoices b;
  auto named = [&](const char* key, const auto& names, auto& out) {
    if (!f.contains(key)) return;
    const std::string value = f.string(key);
    for (size_t i = 0; i < std::size(names); ++i) {
      if (value == names[i]) {
        out = static_cast<std::remove_reference_t<decltype(out)>>(i);
        return;
      }
    }
    f.fail(key, "is \"" + value + "\", not a known choice");
  };
  named("norm_placement", kPlacements, b.norm_placement);
  named("mlp_activation", kActivations, b.mlp_activation);
  if (f.contains("norm_plus_one")) b.norm_plus_one = f.boolean("norm_plus_one");
  if (f.contains("qk_norm_whole")) b.qk_norm_whole = f.boolean("qk_norm_whole");
  if (f.contains("scale_embeddings")) b.scale_embeddings = f.boolean("scale_embeddings");
  for (const auto& [key, out] : {std::pair{"query_pre_attn_scalar", &b.query_pre_attn_scalar},
                                 std::pair{"attn_logit_softcap", &b.attn_logit_softcap},
                                 std::pair{"final_logit_softcap", &b.final_logit_softcap},
                                 std::pair{"rope_local_theta", &b.rope_local_theta}}) {
    if (f.contains(key)) *out = f.positive_finite(key);
  }
  if (f.contains("sliding_layers")) {
    for (const json& layer : f.array("sliding_layers")) {
      if (!layer.is_boolean()) f.fail("sliding_layers", "must hold true or false per layer");
      b.sliding_layers.push_back(layer.get<bool>());
    }
  }
  return b;
}

}  // namespace accel::checkpoint
