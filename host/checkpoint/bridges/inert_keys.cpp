// The list behind is_inert_hf_config_key (inert_keys.h), with why each group
// cannot change training.
#include "host/checkpoint/bridges/inert_keys.h"

#include <algorithm>
#include <array>

namespace accel::checkpoint::bridge {
namespace {

constexpr auto kInertKeys = std::to_array<std::string_view>({
    // Where the file came from and which library wrote it.
    "_name_or_path", "transformers_version", "auto_map", "_commit_hash", "_attn_implementation_autoset",
    // The dtype the weights are stored in: the run's --precision decides.
    "dtype", "torch_dtype", "use_bfloat16",
    // Token ids and labels: the data decides which tokens appear.
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id", "id2label",
    "label2id", "num_labels", "problem_type", "finetuning_task", "tokenizer_class", "prefix",
    "task_specific_params",
    // What forward returns and how inference caches, never what it computes.
    "use_cache", "return_dict", "output_attentions", "output_hidden_states", "torchscript",
    "chunk_size_feed_forward", "is_decoder", "is_encoder_decoder", "tie_encoder_decoder",
    "cross_attention_hidden_size", "tf_legacy_loss",
    // How transformers initialises weights; --init-from loads them instead.
    "initializer_range",
    // Generation defaults older transformers wrote into config.json.
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
    "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty",
    "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences",
    "output_scores", "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id",
    "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
    // GPT-2's sequence-summary head (GPT2DoubleHeadsModel only).
    "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels", "summary_first_dropout",
});

}  // namespace

bool is_inert_hf_config_key(std::string_view key) {
  return std::find(kInertKeys.begin(), kInertKeys.end(), key) != kInertKeys.end();
}

}  // namespace accel::checkpoint::bridge
