// The mixture-of-experts MLP and its auxiliary losses (see moe.h).
#include "host/model/moe.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <tuple>

namespace accel::model {
namespace {

void check(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("moe: " + what);
}

std::string shape_of(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
  return s + "]";
}

void check_shapes(const at::Tensor& x, const MoeWeights& w, const MoeSettings& s, int64_t ranks) {
  check(s.experts >= 1, "experts must be >= 1");
  check(s.top_k >= 1 && s.top_k <= s.experts,
        "top_k " + std::to_string(s.top_k) + " is outside [1, " + std::to_string(s.experts) + "]");
  check(std::isfinite(s.capacity_factor) && s.capacity_factor >= 0.0, "capacity_factor must be finite and >= 0");
  check(x.dim() == 2, "the tokens must be [T, h], got " + shape_of(x));
  const int64_t h = x.size(1);
  check(w.router.dim() == 2 && w.router.size(0) == s.experts && w.router.size(1) == h,
        "router is " + shape_of(w.router) + ", expected [" + std::to_string(s.experts) + ", " + std::to_string(h) +
            "]");
  check(s.experts % ranks == 0, std::to_string(s.experts) + " experts do not split over an expert group of " +
                                     std::to_string(ranks));
  const int64_t local = s.experts / ranks;  // the experts this rank holds
  check(w.gate.dim() == 3 && w.gate.size(0) == local && w.gate.size(2) == h, "gate is " + shape_of(w.gate));
  check(w.up.sizes() == w.gate.sizes(), "up is " + shape_of(w.up) + ", gate " + shape_of(w.gate));
  check(w.down.dim() == 3 && w.down.size(0) == local && w.down.size(1) == h && w.down.size(2) == w.gate.size(1),
        "down is " + shape_of(w.down));
  if (w.shared_gate.defined()) {
    check(w.shared_up.defined() && w.shared_down.defined() && w.shared_expert_gate.defined(),
          "a shared expert needs shared_gate, shared_up, shared_down and shared_expert_gate");
    check(w.shared_gate.dim() == 2 && w.shared_gate.size(1) == h && w.shared_up.sizes() == w.shared_gate.sizes() &&
              w.shared_down.dim() == 2 && w.shared_down.size(0) == h &&
              w.shared_down.size(1) == w.shared_gate.size(0) && w.shared_expert_gate.dim() == 2 &&
              w.shared_expert_gate.size(0) == 1 && w.shared_expert_gate.size(1) == h,
          "shared expert shapes " + shape_of(w.shared_gate) + ", " + shape_of(w.shared_up) + ", " +
              shape_of(w.shared_down) + ", " + shape_of(w.shared_expert_gate) + " do not fit width " +
              std::to_string(h));
  }
}

at::Tensor swiglu(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& up, const at::Tensor& down) {
  return at::linear(at::silu(at::linear(x, gate)) * at::linear(x, up), down);
}

// A SwiGLU whose projections run through the weights' linear when set;
// `gate` names the first of its three MoeProjections (gate, up, down).
at::Tensor swiglu(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& up, const at::Tensor& down,
                  const MoeWeights& w, MoeProjection first) {
  if (!w.linear) return swiglu(x, gate, up, down);
  const auto which = [first](int k) { return static_cast<MoeProjection>(static_cast<int>(first) + k); };
  return w.linear(at::silu(w.linear(x, gate, which(0))) * w.linear(x, up, which(1)), down, which(2));
}

at::Tensor expert_swiglu(const at::Tensor& x, const MoeWeights& w, int64_t e) {
  return swiglu(x, w.gate[e], w.up[e], w.down[e], w, MoeProjection::expert_gate);
}

// Expert parallelism: the assignments' rows (`token_of`, sorted by expert,
// count[e] for expert e of all E) go to their experts' ranks, run there,
// and their outputs come back in the same order.
at::Tensor run_on_expert_ranks(const at::Tensor& x, const at::Tensor& token_of, const int64_t* count,
                               const MoeWeights& w, int64_t experts, const ExpertGroup& g) {
  const int64_t ranks = g.size, local = experts / ranks;
  const auto P = static_cast<size_t>(ranks);
  std::vector<int64_t> send_rows(P, 0);
  for (int64_t e = 0; e < experts; ++e) send_rows[static_cast<size_t>(e / local)] += count[e];
  // How many rows each rank sends each of this rank's experts: from[s * local + e].
  const at::Tensor counts = at::from_blob(const_cast<int64_t*>(count), {experts, 1}, at::kLong).clone();
  const at::Tensor mine = g.all_to_all_v(counts, std::vector<int64_t>(P, local), std::vector<int64_t>(P, local));
  const int64_t* from = mine.data_ptr<int64_t>();
  std::vector<int64_t> recv_rows(P, 0), source_start(P, 0);
  for (size_t s = 0; s < P; ++s) {
    for (int64_t e = 0; e < local; ++e) recv_rows[s] += from[static_cast<int64_t>(s) * local + e];
    if (s > 0) source_start[s] = source_start[s - 1] + recv_rows[s - 1];
  }
  const at::Tensor received = exchange_rows(x.index_select(0, token_of), send_rows, recv_rows, g);
  // The rows arrive by source, each source's by expert: regrouped by expert.
  std::vector<int64_t> order, per_expert(static_cast<size_t>(local), 0);
  order.reserve(static_cast<size_t>(received.size(0)));
  for (int64_t e = 0; e < local; ++e) {
    for (size_t s = 0; s < P; ++s) {
      int64_t start = source_start[s];
      for (int64_t before = 0; before < e; ++before) start += from[static_cast<int64_t>(s) * local + before];
      const int64_t n = from[static_cast<int64_t>(s) * local + e];
      for (int64_t i = 0; i < n; ++i) order.push_back(start + i);
      per_expert[static_cast<size_t>(e)] += n;
    }
  }
  const auto index = at::TensorOptions().dtype(at::kLong).device(x.device());
  const at::Tensor order_t = at::tensor(order, at::kLong).to(x.device());
  const at::Tensor grouped = received.index_select(0, order_t);
  // Always a graph through the exchange back, even for a rank no token
  // reached: every rank's backward then runs both exchanges.
  std::vector<at::Tensor> outputs = {grouped.narrow(0, 0, 0)};
  int64_t offset = 0;
  for (int64_t e = 0; e < local; ++e) {
    const int64_t n = per_expert[static_cast<size_t>(e)];
    if (n == 0) continue;
    outputs.push_back(expert_swiglu(grouped.narrow(0, offset, n), w, e));
    offset += n;
  }
  const at::Tensor inverse =
      at::empty_like(order_t).index_put_({order_t}, at::arange(static_cast<int64_t>(order.size()), index));
  return exchange_rows(at::cat(outputs, 0).index_select(0, inverse), recv_rows, send_rows, g);
}

}  // namespace

int64_t moe_capacity(const MoeSettings& settings, int64_t tokens) {
  if (settings.capacity_factor <= 0.0) return 0;
  const double slots = settings.capacity_factor * static_cast<double>(tokens) *
                       static_cast<double>(settings.top_k) / static_cast<double>(settings.experts);
  // An expert takes a token at most once (top k picks distinct experts), so
  // a capacity of `tokens` or more drops nothing: no cap. Decided in double,
  // before the int64 conversion, which a huge factor (1e300, "never drop")
  // overflowed into a cap of 1.
  if (!(slots < static_cast<double>(tokens))) return 0;
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(slots)));
}

at::Tensor moe_mlp(const at::Tensor& x, const MoeWeights& w, const MoeSettings& s, MoeRouting* routing,
                   const ExpertGroup* group) {
  const bool parallel = group != nullptr && group->active();
  check_shapes(x, w, s, parallel ? group->size : 1);
  const int64_t tokens = x.size(0);
  const int64_t k = s.top_k;
  const at::Tensor logits = at::linear(x, w.router);
  const at::Tensor probs = at::softmax(logits.to(at::kFloat), -1);
  at::Tensor top_weights, top_experts;
  std::tie(top_weights, top_experts) = probs.topk(k, -1);
  if (s.normalize_top_k) top_weights = top_weights / top_weights.sum(-1, /*keepdim=*/true);
  top_weights = top_weights.to(x.scalar_type());

  // The assignments in (slot, token) order: every token's first choice,
  // then every token's second.
  at::Tensor expert_of = top_experts.t().reshape({-1});
  at::Tensor token_of = at::arange(tokens, top_experts.options()).repeat({k});
  at::Tensor weight_of = top_weights.t().reshape({-1});
  int64_t dropped = 0;
  if (const int64_t capacity = moe_capacity(s, tokens); capacity > 0) {
    // Each assignment's place in its expert's queue, in that order.
    const at::Tensor one_hot = at::one_hot(expert_of, s.experts);
    const at::Tensor place = (one_hot.cumsum(0) * one_hot).sum(-1) - 1;
    const at::Tensor kept = (place < capacity).nonzero().squeeze(1);
    dropped = expert_of.size(0) - kept.size(0);
    expert_of = expert_of.index_select(0, kept);
    token_of = token_of.index_select(0, kept);
    weight_of = weight_of.index_select(0, kept);
  }
  // Grouped by expert; the stable sort keeps (slot, token) order inside each.
  const at::Tensor order = std::get<1>(expert_of.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false));
  token_of = token_of.index_select(0, order);
  weight_of = weight_of.index_select(0, order);
  const at::Tensor counts = at::bincount(expert_of, /*weights=*/{}, s.experts).to(at::kCPU);
  const int64_t* count = counts.data_ptr<int64_t>();

  // Every assignment's output in expert order (here or on the experts'
  // ranks), weighted, then summed into its token's row in one pass: the
  // same additions in the same order as expert by expert, with one gather
  // and one scatter instead of one of each per expert.
  at::Tensor y;
  if (parallel) {
    y = run_on_expert_ranks(x, token_of, count, w, s.experts, *group);
  } else {
    const at::Tensor rows = x.index_select(0, token_of);
    std::vector<at::Tensor> outputs = {rows.narrow(0, 0, 0)};
    int64_t offset = 0;
    for (int64_t e = 0; e < s.experts; ++e) {
      const int64_t n = count[e];
      if (n == 0) continue;
      outputs.push_back(expert_swiglu(rows.narrow(0, offset, n), w, e));
      offset += n;
    }
    y = at::cat(outputs, 0);
  }
  at::Tensor out = at::zeros_like(x).index_add_(0, token_of, y * weight_of.unsqueeze(1));
  if (w.shared_gate.defined()) {
    out = out + at::sigmoid(at::linear(x, w.shared_expert_gate)) *
                    swiglu(x, w.shared_gate, w.shared_up, w.shared_down, w, MoeProjection::shared_gate);
  }
  if (routing) {
    routing->logits = logits;
    routing->tokens_per_expert.assign(count, count + s.experts);
    routing->dropped = dropped;
  }
  return out;
}

at::Tensor load_balancing_loss(const std::vector<at::Tensor>& router_logits, int64_t experts, int64_t top_k) {
  check(!router_logits.empty(), "load_balancing_loss needs at least one layer's router logits");
  at::Tensor assigned = at::zeros({experts}, router_logits.front().options().dtype(at::kFloat));
  at::Tensor probability = at::zeros({experts}, router_logits.front().options().dtype(at::kFloat));
  int64_t rows = 0;
  for (const at::Tensor& logits : router_logits) {
    check(logits.dim() == 2 && logits.size(1) == experts,
          "router logits are " + shape_of(logits) + ", expected [T, " + std::to_string(experts) + "]");
    const at::Tensor probs = at::softmax(logits.to(at::kFloat), -1);
    const at::Tensor chosen = std::get<1>(probs.topk(top_k, -1));
    assigned = assigned + at::one_hot(chosen.reshape({-1}), experts).sum(0).to(at::kFloat);
    probability = probability + probs.sum(0);
    rows += logits.size(0);
  }
  const double n = static_cast<double>(rows);
  return ((assigned / n) * (probability / n)).sum() * static_cast<double>(experts);
}

at::Tensor router_z_loss(const std::vector<at::Tensor>& router_logits) {
  check(!router_logits.empty(), "router_z_loss needs at least one layer's router logits");
  std::vector<at::Tensor> all;
  all.reserve(router_logits.size());
  for (const at::Tensor& logits : router_logits) all.push_back(logits.to(at::kFloat));
  return at::logsumexp(at::cat(all, 0), -1).pow(2).mean();
}

}  // namespace accel::model
