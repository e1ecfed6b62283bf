// Expert parallelism (GShard, Lepikhin et al. 2020; DeepSpeed-MoE;
// Megatron-Core's all-to-all token dispatcher): a block's E experts are
// split over an expert group of P ranks, E / P consecutive experts each
// (rank r holds experts [r E/P, (r + 1) E/P)). Every rank routes its own
// tokens with the whole router, sends each token's row to the ranks holding
// its chosen experts (all_to_all_v), runs its experts on what it received,
// and sends the outputs back the same way; the routing weights and the
// sum into the tokens stay with the tokens' owner (model/moe.h).
//
// The exchange is differentiable: its backward is the same exchange with
// the counts swapped, so a token's gradient returns to the rank that holds
// it and each expert's weight gradient sums the tokens every rank of the
// group sent it.
//
// Invariant: every rank of the group runs the same blocks in the same order
// (the collectives pair up). Not thread-safe: the training thread only.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace accel::model {

// The expert group as the model sees it; the runtime injects the exchange.
struct ExpertGroup {
  int64_t size = 1;
  int64_t rank = 0;
  // Rows of the contiguous `input`'s dim 0, in order: send_rows[j] of them
  // go to group rank j; returns the rows received, recv_rows[j] from rank j,
  // in rank order (a [sum(recv_rows), ...] tensor of the input's dtype).
  std::function<at::Tensor(const at::Tensor& input, const std::vector<int64_t>& send_rows,
                           const std::vector<int64_t>& recv_rows)>
      all_to_all_v;
  // The group's slices of a contiguous tensor concatenated along dim 0 in
  // rank order (a checkpoint's whole experts); collective over the group.
  std::function<at::Tensor(const at::Tensor& input)> all_gather;

  bool active() const { return size > 1; }
};

// The exchange as an autograd function: `rows` [sum(send_rows), ...] out,
// [sum(recv_rows), ...] back; backward exchanges the gradient the other way.
at::Tensor exchange_rows(const at::Tensor& rows, const std::vector<int64_t>& send_rows,
                         const std::vector<int64_t>& recv_rows, const ExpertGroup& group);

}  // namespace accel::model
