// libFuzzer target for the Hugging Face config.json reader
// (host/checkpoint/hf_config.h), both families: the seeds and the
// dictionary steer it to GPT-2's and Llama's keys by model_type. Properties
// checked:
//   1. parse_hf_config throws CheckpointError or nothing (any other
//      exception escapes and libFuzzer reports it as a crash; a stack
//      overflow or an overflowing product is a crash under ASan+UBSan);
//   2. an accepted config is a model the host can build: every dimension in
//      [1, kMaxModelDimension], at least 2 tokens, heads dividing the width,
//      for Llama key/value heads dividing the heads, an even head width, and
//      a finite epsilon and rotary base > 0;
//   3. what export-hf would write for it (hf_config_json) parses back to the
//      same shape and the same keys beyond it (HfConfigKeys).
// Build: clang with -DACCEL_FUZZ=ON (tests/fuzz/CMakeLists.txt); run:
//   ./hf_config_fuzz -dict=tests/fuzz/json.dict -max_len=1024 tests/fuzz/corpus_hf_config
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "host/checkpoint/hf_config.h"
#include "host/model/model_limits.h"

namespace {

using accel::checkpoint::CheckpointError;
using accel::checkpoint::HfModelConfig;
using accel::model::GptConfig;
using accel::model::kMaxModelDimension;
using accel::model::ModelFamily;

void require(bool condition) {
  if (!condition) std::abort();
}

bool dimension_ok(int64_t value) { return value >= 1 && value <= kMaxModelDimension; }

void check_shape(const GptConfig& s) {
  require(dimension_ok(s.n_layer) && dimension_ok(s.n_head) && dimension_ok(s.n_embd) && dimension_ok(s.seq_len) &&
          dimension_ok(s.vocab_size) && s.vocab_size >= 2);
  require(s.n_embd % s.n_head == 0);
  require(std::isfinite(s.norm_eps) && s.norm_eps > 0);
  if (s.family == ModelFamily::llama) {
    require(dimension_ok(s.n_kv_head) && s.n_head % s.n_kv_head == 0 && s.attention_head_dim() % 2 == 0);
    require(dimension_ok(s.ffn_size));
    require(std::isfinite(s.rope_theta) && s.rope_theta > 0);
  } else {
    require(s.norm_eps == 1e-5);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  HfModelConfig config;
  try {
    config = accel::checkpoint::parse_hf_config(text, "fuzz/config.json");
  } catch (const CheckpointError&) {
    return 0;
  }
  check_shape(config.shape);
  const HfModelConfig again = accel::checkpoint::parse_hf_config(
      accel::checkpoint::hf_config_json(config.shape, config.keys), "fuzz/rewritten");
  require(again.shape == config.shape && again.keys == config.keys && again.ignored.empty());
  return 0;
}
