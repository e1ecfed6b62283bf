// GPT-2 (GPT2LMHeadModel): the host's GPT-2 block (LayerNorm, learned
// positions, tanh-GELU MLP of 4x width, head tied to wte). Its weights are
// "transformer."-prefixed Conv1D tensors (hf_checkpoint.cpp).
#include <optional>

#include "host/checkpoint/bridges/bridge_support.h"
#include "host/model/model_limits.h"
#include "host/util/strformat.h"

namespace accel::checkpoint::bridge {
namespace {

using nlohmann::json;

HfModelConfig read(const JsonFields& config) {
  require_architectures(config, {"GPT2LMHeadModel", "GPT2Model"}, "GPT2LMHeadModel");
  ModelOverrides o;
  o.vocab_size = dimension(config, "vocab_size", 2);
  o.seq_len = dimension(config, "n_positions");
  o.n_embd = dimension(config, "n_embd");
  o.n_layer = dimension(config, "n_layer");
  o.n_head = dimension(config, "n_head");
  require_heads_divide(config, "n_embd", *o.n_embd, "n_head", *o.n_head);
  require_string(config, "activation_function", {"gelu_new", "gelu_pytorch_tanh"},
                 "accel-host's GPT-2 uses the tanh GELU (gelu_new)");
  if (config.has_value("layer_norm_epsilon")) {
    const double epsilon = config.positive_finite("layer_norm_epsilon");
    if (epsilon != 1e-5) {
      config.fail("layer_norm_epsilon", "is " + sdk::describe(config.value("layer_norm_epsilon")) +
                                            "; accel-host's GPT-2 normalises with epsilon 1e-05");
    }
  }
  if (const auto inner = config.optional_integer("n_inner", 1, model::kMaxModelDimension);
      inner && *inner != 4 * *o.n_embd) {
    config.fail("n_inner", strformat("is %lld; accel-host's GPT-2 MLP is 4 * n_embd = %lld wide",
                                     static_cast<long long>(*inner), static_cast<long long>(4 * *o.n_embd)));
  }
  require_boolean(config, "scale_attn_weights", true, "accel-host's GPT-2 scales attention scores by 1/sqrt(head size)");
  require_boolean(config, "scale_attn_by_inverse_layer_idx", false, "accel-host's GPT-2 does not scale by the layer index");
  require_boolean(config, "reorder_and_upcast_attn", false, "accel-host's GPT-2 computes attention in the weights' dtype");
  require_boolean(config, "add_cross_attention", false, "accel-host's GPT-2 is a decoder without cross-attention");
  require_boolean(config, "tie_word_embeddings", true, "accel-host's GPT-2 ties the head to wte");
  HfModelConfig out;
  for (const char* key : {"resid_pdrop", "embd_pdrop", "attn_pdrop"}) note_dropout(config, key, out.ignored);
  out.shape = build_shape(config.where(), "gpt-tiny", o);
  return out;
}

bool writes(const model::GptConfig& shape) { return shape.family == model::ModelFamily::gpt2; }

// As GPT2Config.to_json_string lays out the keys the host sets (dropout 0:
// the host trained without it).
std::string config_json(const model::GptConfig& shape, const HfConfigKeys& /*keys*/) {
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

}  // namespace

const HfBridge& gpt2_bridge() {
  static const HfBridge bridge{"gpt2", "GPT2LMHeadModel", "GPT-2", HfWeightNames::gpt2, read, writes, config_json};
  return bridge;
}

}  // namespace accel::checkpoint::bridge
