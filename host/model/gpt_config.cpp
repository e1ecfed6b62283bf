// GPT presets and shape validation (see gpt_config.h).
#include "host/model/gpt_config.h"

#include <stdexcept>

#include "host/util/strformat.h"

namespace accel::model {

std::string GptConfig::describe() const {
  return strformat("n_layer=%lld n_head=%lld n_embd=%lld seq_len=%lld vocab_size=%lld",
                   static_cast<long long>(n_layer), static_cast<long long>(n_head),
                   static_cast<long long>(n_embd), static_cast<long long>(seq_len),
                   static_cast<long long>(vocab_size));
}

GptConfig make_gpt_config(const std::string& preset, const ModelOverrides& overrides) {
  GptConfig config;
  if (preset == "gpt-tiny") {
    config = GptConfig{2, 4, 64, 64, 256};
  } else if (preset == "gpt-small") {
    config = GptConfig{12, 12, 768, 1024, 50257};
  } else {
    throw std::invalid_argument("--model: unknown model '" + preset +
                                "' (expected gpt-tiny or gpt-small)");
  }
  if (overrides.n_layer) config.n_layer = *overrides.n_layer;
  if (overrides.n_head) config.n_head = *overrides.n_head;
  if (overrides.n_embd) config.n_embd = *overrides.n_embd;
  if (overrides.seq_len) config.seq_len = *overrides.seq_len;
  if (overrides.vocab_size) config.vocab_size = *overrides.vocab_size;

  if (config.n_layer < 1) throw std::invalid_argument("--n-layer must be >= 1");
  if (config.n_head < 1) throw std::invalid_argument("--n-head must be >= 1");
  if (config.n_embd < 1 || config.n_embd % config.n_head != 0) {
    throw std::invalid_argument(strformat("--n-embd %lld must be a positive multiple of --n-head %lld",
                                          static_cast<long long>(config.n_embd),
                                          static_cast<long long>(config.n_head)));
  }
  if (config.seq_len < 1) throw std::invalid_argument("--seq-len must be >= 1");
  if (config.vocab_size < 2) throw std::invalid_argument("--vocab-size must be >= 2");
  return config;
}

int64_t count_parameters(const GptConfig& c) {
  const int64_t C = c.n_embd;
  const int64_t block = 2 * C /*ln_1*/ + 3 * C * C + 3 * C /*c_attn*/ + C * C + C /*attn.c_proj*/ +
                        2 * C /*ln_2*/ + 4 * C * C + 4 * C /*c_fc*/ + 4 * C * C + C /*mlp.c_proj*/;
  return c.vocab_size * C + c.seq_len * C + c.n_layer * block + 2 * C /*ln_f*/;
}

double minimum_training_bytes(const GptConfig& c, int64_t micro_batch, double bytes_per_parameter) {
  const double C = static_cast<double>(c.n_embd);
  const double block = 12.0 * C * C + 13.0 * C;  // as count_parameters
  const double parameters = static_cast<double>(c.vocab_size) * C + static_cast<double>(c.seq_len) * C +
                            static_cast<double>(c.n_layer) * block + 2.0 * C;
  const double logits = static_cast<double>(micro_batch) * static_cast<double>(c.seq_len) *
                        static_cast<double>(c.vocab_size);
  return bytes_per_parameter * parameters + 4.0 * logits;
}

}  // namespace accel::model
