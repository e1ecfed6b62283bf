// Context parallelism's layout and attention (see context_parallel.h).
#include "host/model/context_parallel.h"

#include <torch/csrc/autograd/custom_function.h>

#include <array>
#include <stdexcept>
#include <vector>

#include "host/model/attention_blocks.h"

namespace accel::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

const ContextGroup& group_at(int64_t address) { return *reinterpret_cast<const ContextGroup*>(address); }

// Tags of the ring's two kinds of hop: key/value blocks, and their gradients
// (in flight together during backward).
constexpr int kBlockTag = 0x4350;
constexpr int kGradTag = 0x4351;

// Ulysses' exchange: [B, H, T, D] split by sequence -> [B, H / A, A T, D]
// split by heads (heads_to_sequence), and its inverse. Each is the other's
// adjoint (an all-to-all only permutes), so each backs the other.
at::Tensor sequence_to_heads(const at::Tensor& x, const ContextGroup& g) {
  const int64_t A = g.a2a_size, B = x.size(0), H = x.size(1), T = x.size(2), D = x.size(3);
  const at::Tensor packed = x.unflatten(1, {A, H / A}).permute({1, 0, 2, 3, 4}).contiguous();
  return g.all_to_all(packed).permute({1, 2, 0, 3, 4}).reshape({B, H / A, A * T, D});
}
at::Tensor heads_to_sequence(const at::Tensor& y, const ContextGroup& g) {
  const int64_t A = g.a2a_size, B = y.size(0), h = y.size(1), T = y.size(2) / A, D = y.size(3);
  const at::Tensor packed = y.unflatten(2, {A, T}).permute({2, 0, 1, 3, 4}).contiguous();
  return g.all_to_all(packed).permute({1, 0, 2, 3, 4}).reshape({B, A * h, T, D});
}

struct UlyssesExchange : public torch::autograd::Function<UlyssesExchange> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group, bool to_heads) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["to_heads"] = to_heads;
    return to_heads ? sequence_to_heads(x, group_at(group)) : heads_to_sequence(x, group_at(group));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const ContextGroup& g = group_at(ctx->saved_data["group"].toInt());
    const bool to_heads = ctx->saved_data["to_heads"].toBool();
    return {to_heads ? heads_to_sequence(grads[0], g) : sequence_to_heads(grads[0], g), at::Tensor(), at::Tensor()};
  }
};

// What both exchanges' backward reads: the inputs, the merged result (in
// the queries' dtype, returned) and its fp32 log-sum-exp, and the group.
at::Tensor save_attention(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& out, const at::Tensor& lse, int64_t group) {
  const at::Tensor result = out.to(q.scalar_type());
  ctx->save_for_backward({q, k, v, result, lse});
  ctx->saved_data["group"] = group;
  return result;
}

struct SavedAttention {
  const ContextGroup& group;
  variable_list saved;  // q, k, v, out, lse
};
SavedAttention saved_attention(AutogradContext* ctx) {
  return {group_at(ctx->saved_data["group"].toInt()), ctx->get_saved_variables()};
}

// Which part of a ring step's work is unmasked, with the balanced layout:
// this rank's queries are chunks (r, 2R-1-r), the block's keys (s, 2R-1-s).
//   s == r: the local block, causal (both halves in increasing order);
//   s <  r: every query sees the block's early chunk, none its late one;
//   s >  r: only the late query chunk sees the block, all of it.
enum class BlockPart { local_causal, early_keys, late_queries };
BlockPart part_of(int64_t mine, int64_t theirs) {
  if (theirs == mine) return BlockPart::local_causal;
  return theirs < mine ? BlockPart::early_keys : BlockPart::late_queries;
}

struct RingAttention : public torch::autograd::Function<RingAttention> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            int64_t group) {
    const ContextGroup& g = group_at(group);
    const int64_t R = g.ring_size, r = g.ring_rank, half = q.size(2) / 2;
    at::Tensor out, lse;  // fp32 running result
    at::Tensor block = at::stack({k, v});  // [2, B, KV, T, D]: one message per hop
    for (int64_t step = 0; step < R; ++step) {
      const int64_t source = ((r - step) % R + R) % R;
      ContextGroup::Transfer next;
      if (step + 1 < R) next = g.ring_pass(block, kBlockTag);  // in flight while this block is computed
      const at::Tensor bk = block[0], bv = block[1];
      switch (part_of(r, source)) {
        case BlockPart::local_causal: merge_attention_block(out, lse, attention_block_forward(q, bk, bv, true)); break;
        case BlockPart::early_keys:
          merge_attention_block(out, lse,
                                attention_block_forward(q, bk.narrow(2, 0, half), bv.narrow(2, 0, half), false));
          break;
        case BlockPart::late_queries: {
          at::Tensor late_out = out.narrow(2, half, half), late_lse = lse.narrow(2, half, half);
          merge_attention_block(late_out, late_lse, attention_block_forward(q.narrow(2, half, half), bk, bv, false));
          break;
        }
      }
      if (next) block = next();
    }
    return save_attention(ctx, q, k, v, out, lse, group);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto [g, saved] = saved_attention(ctx);
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const at::Tensor grad_out = grads[0];
    const int64_t R = g.ring_size, r = g.ring_rank, half = q.size(2) / 2;
    at::Tensor dq = at::zeros(q.sizes(), q.options().dtype(at::kFloat));
    at::Tensor block = at::stack({k, v});
    // The gradient of the block in hand, travelling with it: it leaves
    // after each step and reaches its owner after the last.
    at::Tensor block_grad = at::zeros(block.sizes(), block.options().dtype(at::kFloat));
    for (int64_t step = 0; step < R; ++step) {
      const int64_t source = ((r - step) % R + R) % R;
      ContextGroup::Transfer next;
      if (step + 1 < R) next = g.ring_pass(block, kBlockTag);
      const at::Tensor bk = block[0], bv = block[1];
      switch (part_of(r, source)) {
        case BlockPart::local_causal: {
          auto [gq, gk, gv] = attention_block_backward(grad_out, q, bk, bv, out, lse, true);
          dq.add_(gq);
          block_grad[0].add_(gk);
          block_grad[1].add_(gv);
          break;
        }
        case BlockPart::early_keys: {
          auto [gq, gk, gv] = attention_block_backward(grad_out, q, bk.narrow(2, 0, half), bv.narrow(2, 0, half), out,
                                                       lse, false);
          dq.add_(gq);
          block_grad[0].narrow(2, 0, half).add_(gk);
          block_grad[1].narrow(2, 0, half).add_(gv);
          break;
        }
        case BlockPart::late_queries: {
          auto [gq, gk, gv] = attention_block_backward(grad_out.narrow(2, half, half), q.narrow(2, half, half), bk, bv,
                                                       out.narrow(2, half, half), lse.narrow(2, half, half), false);
          dq.narrow(2, half, half).add_(gq);
          block_grad[0].add_(gk);
          block_grad[1].add_(gv);
          break;
        }
      }
      // Received: the previous rank's gradient of the block that comes next
      // (after the last step, of this rank's own block).
      block_grad = g.ring_pass(block_grad, kGradTag)();
      if (next) block = next();
    }
    return {dq.to(q.scalar_type()), block_grad[0].to(k.scalar_type()), block_grad[1].to(v.scalar_type()),
            at::Tensor()};
  }
};

// The all-gather exchange of the ring's layout. Gathered blocks [R, 2, B,
// KV, 2c, D] (ring rank s holds chunks s and 2R-1-s, c positions each) in
// sequence order: chunks 0..2R-1 along dim 3 ([2, B, KV, 2Rc, D]).
at::Tensor in_sequence_order(const at::Tensor& blocks) {
  const int64_t R = blocks.size(0), c = blocks.size(4) / 2;
  std::vector<at::Tensor> chunks;
  for (int64_t s = 0; s < R; ++s) chunks.push_back(blocks[s].narrow(3, 0, c));
  for (int64_t s = R - 1; s >= 0; --s) chunks.push_back(blocks[s].narrow(3, c, c));
  return at::cat(chunks, 3);
}

// in_sequence_order's adjoint: [2, B, KV, 2Rc, D] back to [R, 2, B, KV, 2c, D].
at::Tensor in_block_order(const at::Tensor& sequence, int64_t R) {
  const int64_t c = sequence.size(3) / (2 * R);
  std::vector<at::Tensor> blocks;
  for (int64_t s = 0; s < R; ++s) {
    blocks.push_back(at::cat({sequence.narrow(3, s * c, c), sequence.narrow(3, (2 * R - 1 - s) * c, c)}, 3));
  }
  return at::stack(blocks);
}

// Rank r's two query chunks (r, and 2R-1-r) against the gathered sequence
// [2, B, KV, 2Rc, D]: each sees the whole chunks before its own, then its
// own chunk causally.
struct GatheredHalf {
  int64_t query_begin;  // within this rank's 2c queries
  int64_t chunk;        // the half's chunk index in the sequence
};
std::array<GatheredHalf, 2> gathered_halves(int64_t R, int64_t r) { return {{{0, r}, {1, 2 * R - 1 - r}}}; }

struct AllGatherAttention : public torch::autograd::Function<AllGatherAttention> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            int64_t group) {
    const ContextGroup& g = group_at(group);
    const int64_t c = q.size(2) / 2;
    const at::Tensor kv = in_sequence_order(g.ring_all_gather(at::stack({k, v})));
    at::Tensor out = at::empty(q.sizes(), q.options().dtype(at::kFloat));
    at::Tensor lse = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat));
    for (const GatheredHalf& h : gathered_halves(g.ring_size, g.ring_rank)) {
      const at::Tensor qh = q.narrow(2, h.query_begin * c, c);
      at::Tensor o, l;  // undefined: the first block is taken as it is
      if (h.chunk > 0) {
        merge_attention_block(o, l, attention_block_forward(qh, kv[0].narrow(2, 0, h.chunk * c),
                                                            kv[1].narrow(2, 0, h.chunk * c), false));
      }
      merge_attention_block(o, l, attention_block_forward(qh, kv[0].narrow(2, h.chunk * c, c),
                                                          kv[1].narrow(2, h.chunk * c, c), true));
      out.narrow(2, h.query_begin * c, c).copy_(o);
      lse.narrow(2, h.query_begin * c, c).copy_(l);
    }
    // The gathered blocks are not kept: backward gathers them again.
    return save_attention(ctx, q, k, v, out, lse, group);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto [g, saved] = saved_attention(ctx);
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const at::Tensor grad_out = grads[0];
    const int64_t c = q.size(2) / 2;
    const at::Tensor kv = in_sequence_order(g.ring_all_gather(at::stack({k, v})));
    at::Tensor dq = at::zeros(q.sizes(), q.options().dtype(at::kFloat));
    at::Tensor dkv = at::zeros(kv.sizes(), kv.options().dtype(at::kFloat));
    for (const GatheredHalf& h : gathered_halves(g.ring_size, g.ring_rank)) {
      const int64_t begin = h.query_begin * c;
      const auto part = [&](int64_t key_begin, int64_t keys, bool causal) {
        auto [gq, gk, gv] = attention_block_backward(
            grad_out.narrow(2, begin, c), q.narrow(2, begin, c), kv[0].narrow(2, key_begin, keys),
            kv[1].narrow(2, key_begin, keys), out.narrow(2, begin, c), lse.narrow(2, begin, c), causal);
        dq.narrow(2, begin, c).add_(gq);
        dkv[0].narrow(2, key_begin, keys).add_(gk);
        dkv[1].narrow(2, key_begin, keys).add_(gv);
      };
      if (h.chunk > 0) part(0, h.chunk * c, false);
      part(h.chunk * c, c, true);
    }
    // Every rank's gradient of every block, summed at its owner.
    const at::Tensor mine = g.ring_reduce_scatter(in_block_order(dkv, g.ring_size).contiguous());
    return {dq.to(q.scalar_type()), mine[0].to(k.scalar_type()), mine[1].to(v.scalar_type()), at::Tensor()};
  }
};

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t groups = q.size(1) / k.size(1);
  const at::Tensor keys = groups == 1 ? k : k.repeat_interleave(groups, 1);
  const at::Tensor values = groups == 1 ? v : v.repeat_interleave(groups, 1);
  return at::scaled_dot_product_attention(q, keys, values, std::nullopt, /*dropout_p=*/0.0, /*is_causal=*/true);
}

}  // namespace

std::string ContextGroup::layout_problem(int64_t seq_len) const {
  const std::string shape = ring_size > 1 && a2a_size > 1
                                ? " (a ring of " + std::to_string(ring_size) + " x all-to-all of " +
                                      std::to_string(a2a_size) + ")"
                                : "";
  if (ring_size > 1 && seq_len % (2 * ring_size) != 0) {
    return "context parallelism: seq_len " + std::to_string(seq_len) + " does not split into the ring's " +
           std::to_string(2 * ring_size) + " load-balanced chunks" + shape;
  }
  if ((seq_len / ring_size) % a2a_size != 0) {
    return "context parallelism: seq_len " + std::to_string(seq_len) + " does not split over " +
           std::to_string(a2a_size) + " all-to-all ranks" + shape;
  }
  return "";
}

at::Tensor ContextGroup::positions(int64_t seq_len, at::Device device) const {
  const std::string problem = layout_problem(seq_len);
  if (!problem.empty()) throw std::invalid_argument(problem);
  const auto longs = at::TensorOptions().dtype(at::kLong).device(device);
  at::Tensor ring_part = at::arange(seq_len, longs);
  if (ring_size > 1) {
    const int64_t chunk = seq_len / (2 * ring_size);
    ring_part = at::cat({at::arange(ring_rank * chunk, (ring_rank + 1) * chunk, longs),
                         at::arange((2 * ring_size - 1 - ring_rank) * chunk, (2 * ring_size - ring_rank) * chunk, longs)});
  }
  const int64_t piece = ring_part.size(0) / a2a_size;
  return ring_part.narrow(0, a2a_rank * piece, piece);
}

at::Tensor context_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const ContextGroup& group) {
  const auto address = reinterpret_cast<int64_t>(&group);
  at::Tensor queries = q, keys = k, values = v;
  if (group.a2a_size > 1) {
    queries = UlyssesExchange::apply(q, address, true);
    keys = UlyssesExchange::apply(k, address, true);
    values = UlyssesExchange::apply(v, address, true);
  }
  at::Tensor y = group.ring_size <= 1  ? causal_attention(queries, keys, values)
                 : group.gather_ring ? AllGatherAttention::apply(queries, keys, values, address)
                                     : RingAttention::apply(queries, keys, values, address);
  if (group.a2a_size > 1) y = UlyssesExchange::apply(y, address, false);
  return y;
}

}  // namespace accel::model
