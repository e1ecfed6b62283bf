// The table of Hugging Face bridges (see hf_bridge.h). Adding a family: one
// file under bridges/ defining its HfBridge, one line here, one line in
// host/CMakeLists.txt's ACCEL_HF_BRIDGES.
#include "host/checkpoint/hf_bridge.h"

namespace accel::checkpoint {
namespace bridge {
const HfBridge& gpt2_bridge();
const HfBridge& llama_bridge();
const HfBridge& qwen2_bridge();
const HfBridge& qwen3_bridge();
const HfBridge& mistral_bridge();
const HfBridge& mixtral_bridge();
const HfBridge& qwen2_moe_bridge();
const HfBridge& gemma2_bridge();
const HfBridge& gemma3_bridge();
const HfBridge& olmo2_bridge();
const HfBridge& olmo3_bridge();
const HfBridge& ministral3_bridge();
const HfBridge& phi3_bridge();
const HfBridge& smollm3_bridge();
const HfBridge& granite_bridge();
}  // namespace bridge

const std::vector<HfBridge>& hf_bridges() {
  static const std::vector<HfBridge> table = {
      bridge::gpt2_bridge(),    bridge::llama_bridge(),   bridge::qwen2_bridge(),     bridge::qwen3_bridge(),
      bridge::mistral_bridge(), bridge::mixtral_bridge(), bridge::qwen2_moe_bridge(), bridge::gemma2_bridge(),
      bridge::gemma3_bridge(),  bridge::olmo2_bridge(),   bridge::olmo3_bridge(),     bridge::phi3_bridge(),      bridge::smollm3_bridge(),
      bridge::granite_bridge(),  bridge::ministral3_bridge(),
  };
  return table;
}

const HfBridge* find_hf_bridge(std::string_view model_type) {
  for (const HfBridge& bridge : hf_bridges()) {
    if (model_type == bridge.model_type) return &bridge;
  }
  return nullptr;
}

const HfBridge& hf_bridge_for(const model::GptConfig& shape) {
  for (const HfBridge& bridge : hf_bridges()) {
    if (bridge.writes(shape)) return bridge;
  }
  throw CheckpointError("export-hf: no transformers class computes " + shape.describe() + " (supported model types: " +
                        supported_model_types() + ")");
}

const HfBridge& hf_bridge_for(const model::GptConfig& shape, const HfConfigKeys& keys) {
  if (keys.model_type) {
    if (const HfBridge* named = find_hf_bridge(*keys.model_type); named != nullptr && named->writes(shape)) return *named;
  }
  return hf_bridge_for(shape);
}

std::string supported_model_types() {
  std::string names;
  for (const HfBridge& bridge : hf_bridges()) names += (names.empty() ? "" : ", ") + std::string(bridge.model_type);
  return names;
}

}  // namespace accel::checkpoint
