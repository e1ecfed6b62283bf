// Megatron-LM's tensor-parallel operators (Shoeybi et al. 2019, §3; Korthikanti
// et al. 2022 for the sequence-parallel pair) as autograd functions over a
// tensor group whose collectives the runtime injects, so the model code
// knows no communicator:
//   f  copy_to_tensor_region      identity forward, all-reduce backward
//   g  reduce_from_tensor_region  all-reduce forward, identity backward
// placed before a column-parallel linear (f) and after a row-parallel one (g),
// and the vocab-parallel embedding and cross-entropy, where no rank holds the
// whole vocabulary (nor the full logits).
//
// Invariant: every rank of the group calls the same operators in the same
// order (the model's forward is the same program on each), so the
// collectives pair up. Not thread-safe: the training thread only.
#pragma once

#include <ATen/ATen.h>

#include <functional>

namespace accel::model {

// The tensor group as the model sees it. `all_reduce` reduces a contiguous
// tensor in place over the group (sum, or max when `max` is set);
// `all_gather` concatenates the ranks' contiguous tensors along dim 0;
// `reduce_scatter` sums over the group and returns this rank's dim-0 part.
// With `sequence_parallel`, the regions outside the linears (LayerNorms,
// residuals, dropout) hold this rank's slice of the sequence.
struct TensorGroup {
  int64_t size = 1;
  int64_t rank = 0;
  bool sequence_parallel = false;
  std::function<void(at::Tensor& tensor, bool max)> all_reduce;
  std::function<at::Tensor(const at::Tensor& tensor)> all_gather;
  std::function<at::Tensor(const at::Tensor& tensor)> reduce_scatter;

  bool active() const { return size > 1; }
  bool sequence_split() const { return active() && sequence_parallel; }
};

// f: the input of a column-parallel region (its gradient is summed over the group).
at::Tensor copy_to_tensor_region(const at::Tensor& x, const TensorGroup& group);
// g: the output of a row-parallel region (partial sums added over the group).
at::Tensor reduce_from_tensor_region(const at::Tensor& x, const TensorGroup& group);

// Sequence parallelism (Korthikanti et al. 2022), along dim 0 of
// sequence-major activations [seq, batch, hidden]: before a column-parallel
// region, all-gather the sequence (reduce-scatter in backward); after a
// row-parallel one, reduce-scatter it (all-gather in backward).
at::Tensor gather_from_sequence_region(const at::Tensor& x, const TensorGroup& group);
at::Tensor reduce_scatter_to_sequence_region(const at::Tensor& x, const TensorGroup& group);

// Lookup in a vocab-parallel embedding: `weight` holds global rows
// [vocab_start, vocab_start + weight.size(0)); tokens outside read zeros, and
// g sums the ranks' partial lookups.
// Returns the ranks' sum, or with sequence parallelism this rank's sequence
// slice of it (dim 0 of sequence-major tokens [seq, batch]).
at::Tensor vocab_parallel_embedding(const at::Tensor& weight, const at::Tensor& tokens, int64_t vocab_start,
                                    const TensorGroup& group);

// Mean cross-entropy over all positions from vocab-parallel logits [..., V_local]
// whose columns are global classes [vocab_start, vocab_start + V_local); classes
// at or past `vocab_size` are padding and take no probability. Every rank
// returns the same scalar.
at::Tensor vocab_parallel_cross_entropy(const at::Tensor& local_logits, const at::Tensor& targets,
                                        int64_t vocab_start, int64_t vocab_size, const TensorGroup& group);

}  // namespace accel::model
