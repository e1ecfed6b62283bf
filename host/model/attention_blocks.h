// Attention over one block of keys, with the row log-sum-exp that lets
// partial results merge (the flash-attention identity), and its backward
// given the merged output and log-sum-exp. Context parallelism's ring
// (context_parallel.cpp) is built from these three; one process can check
// them against whole-sequence attention (attention_blocks_test.cpp).
//
// Shapes: queries [B, H, Tq, D]; keys and values [B, KV, Tk, D] with KV
// dividing H (grouped-query attention: each key/value head serves H / KV
// consecutive query heads); the output [B, H, Tq, D] in the queries' dtype,
// the log-sum-exp [B, H, Tq] in fp32 (natural log of each row's sum of
// exp(q k / sqrt(D))). `causal` masks top-left aligned (query i sees keys
// 0..i), for Tq == Tk blocks of the same positions.
//
// CPU: ATen's flash-attention kernels for the CPU; CUDA: the memory-efficient
// kernels (fp32 and bf16 alike). Pure functions, any thread.
#pragma once

#include <ATen/ATen.h>

#include <tuple>

namespace accel::model {

struct AttentionBlock {
  at::Tensor out;  // [B, H, Tq, D], the queries' dtype
  at::Tensor lse;  // [B, H, Tq], fp32
};

AttentionBlock attention_block_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal);

// The gradients at q, k and v of this block's share of attention whose
// merged result over every block is (out, lse): with the merged values the
// block's probabilities are the whole row's, so the per-block gradients add
// up to the whole attention's. dk and dv have k's and v's head count.
std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_block_backward(const at::Tensor& grad_out, const at::Tensor& q,
                                                                        const at::Tensor& k, const at::Tensor& v,
                                                                        const at::Tensor& out, const at::Tensor& lse,
                                                                        bool causal);

// Folds `block` into the running fp32 result (out [B, H, Tq, D] fp32, lse):
// undefined `out` takes the block as it is. Both may be views (a slice of
// the queries), updated in place.
void merge_attention_block(at::Tensor& out, at::Tensor& lse, const AttentionBlock& block);

}  // namespace accel::model
