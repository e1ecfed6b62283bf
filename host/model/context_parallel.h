// Context parallelism: one sequence split over the ranks of a context group
// (accel/model.h plan_context_parallel), as Megatron-Core's context_parallel_size
// runs it. Every rank embeds and scores the tokens it holds, at their
// global positions; only attention sees the whole sequence, through
//   - a ring (Liu et al. 2023, "ring attention"): each rank keeps its
//     queries while key/value blocks travel around the ring, the next
//     block's transfer in flight while the block in hand is computed;
//     partial results merge through their log-sum-exp. Backward sends the
//     blocks around again, their gradients travelling with them back to
//     the rank that owns them;
//   - Ulysses (Jacobs et al. 2023): an all-to-all trades the sequence split
//     for a head split before attention, and back after it;
//   - or both: heads over an all-to-all sub-group of adjacent ranks, the
//     ring over the sub-groups;
//   - or the ring's layout exchanged by one all-gather of every key/value
//     block instead of the passes (Megatron-Core's all_gather): each rank
//     attends with its queries to the whole sequence; backward gathers the
//     blocks again and reduce-scatters their gradients to the owners.
//
// The layout balances causal work: under a ring of R ranks the sequence is
// cut into 2R chunks and ring rank r holds chunks r and 2R-1-r (one early,
// one late), then its all-to-all sub-group splits that pair into A equal
// contiguous pieces. A rank's tokens are in increasing position order.
//
// Invariant: every rank of the group runs the same layers in the same
// order, so the exchanges pair up. Not thread-safe: the training thread.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <string>

namespace accel::model {

struct ContextGroup {
  int64_t size = 1;  // C = ring_size * a2a_size
  int64_t rank = 0;  // ring_rank * a2a_size + a2a_rank
  int64_t ring_size = 1, ring_rank = 0;
  int64_t a2a_size = 1, a2a_rank = 0;
  // Over the all-to-all sub-group: chunk j (of a2a_size equal chunks of the
  // contiguous input's dim 0) goes to sub-group rank j; chunk i of the
  // result came from rank i.
  std::function<at::Tensor(const at::Tensor& input)> all_to_all;
  // One hop around the ring, started: sends the contiguous `tensor` to the
  // next ring rank and receives one of its shape from the previous one;
  // the returned function waits and gives it. `tag` keeps two hops in
  // flight at once apart.
  using Transfer = std::function<at::Tensor()>;
  std::function<Transfer(const at::Tensor& tensor, int tag)> ring_pass;
  // The ring's ranks exchange by all-gather instead (gather_ring): every
  // ring rank's `block` stacked in ring-rank order ([R, ...]), and its
  // adjoint, this rank's sum over ranks of [R, ...] at index ring_rank.
  bool gather_ring = false;
  std::function<at::Tensor(const at::Tensor& block)> ring_all_gather;
  std::function<at::Tensor(const at::Tensor& blocks)> ring_reduce_scatter;

  bool active() const { return size > 1; }

  // Why a sequence of `seq_len` tokens cannot be laid out over this group
  // ("" when it can): 2R chunks under a ring, each ring rank's part in A
  // pieces.
  std::string layout_problem(int64_t seq_len) const;
  // The global positions of this rank's tokens of a `seq_len` sequence,
  // increasing, int64 on `device`. Throws std::invalid_argument with
  // layout_problem's line.
  at::Tensor positions(int64_t seq_len, at::Device device) const;
};

// Causal attention of this rank's queries over the whole sequence:
// q [B, H, T/C, D], k and v [B, KV, T/C, D] at this rank's positions;
// returns [B, H, T/C, D]. H and KV must divide by a2a_size. Differentiable.
at::Tensor context_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const ContextGroup& group);

}  // namespace accel::model
