// sharded_optimizer.cpp — clipping and AdamW over shards and host-owned units
// (see sharded_optimizer.h).
#include "sharded_optimizer.h"

#include <accel/sdk/error.hpp>
#include <accel/sdk/tensor.hpp>

#include <algorithm>
#include <memory>
#include <thread>

namespace accel::sharding {

using sdk::Error;

std::vector<DecayRun> decay_runs(const std::vector<ParamLayout>& params, sdk::FlatRange range,
                                 uint32_t no_decay_roles) {
  std::vector<DecayRun> runs;
  for (const ParamLayout& p : params) {
    const sdk::FlatRange part = sdk::intersect(range, sdk::FlatRange{p.flat_offset, p.flat_offset + p.numel});
    if (part.empty()) continue;
    const bool decay = (no_decay_roles & (1u << static_cast<uint32_t>(p.role))) == 0;
    const int64_t begin = part.begin - range.begin;
    if (!runs.empty() && runs.back().decay == decay && runs.back().begin + runs.back().count == begin) {
      runs.back().count += part.size();
    } else {
      runs.push_back(DecayRun{begin, part.size(), decay});
    }
  }
  return runs;
}

std::vector<sdk::FlatRange> split_ranges(const std::vector<ParamLayout>& params, sdk::FlatRange range,
                                         CountedSlices which) {
  std::vector<sdk::FlatRange> out;
  for (const ParamLayout& p : params) {
    if (!p.is_split() || !(is_expert_slice(p) ? which.experts : which.tensor)) continue;
    const sdk::FlatRange part = sdk::intersect(range, sdk::FlatRange{p.flat_offset, p.flat_offset + p.numel});
    if (part.empty()) continue;
    const sdk::FlatRange relative{part.begin - range.begin, part.end - range.begin};
    if (!out.empty() && out.back().end == relative.begin) {
      out.back().end = relative.end;
    } else {
      out.push_back(relative);
    }
  }
  return out;
}

namespace {

// The fused host step's threads: the host's --threads (train.threads) when
// set, else this rank's share of the node's cores (ranks on one node each
// step their own partition at the same time).
int fused_step_threads(const sdk::Services& s) {
  int64_t threads = 0;
  try {
    threads = s.option<int64_t>("train.threads");
  } catch (const Error&) {
    // A host before train.threads: the share of the cores below.
  }
  if (threads > 0) return static_cast<int>(threads);
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  return static_cast<int>(std::max<int64_t>(1, cores / std::max(1, s.identity().local_world_size)));
}

float* host_floats(const DLTensor& t) {
  return reinterpret_cast<float*>(static_cast<char*>(t.data) + t.byte_offset);
}

bool fp32_on_host(const DLTensor& t) {
  return sdk::is_host(t) && accel_dtype_equal(t.dtype, DLDataType{kDLFloat, 32, 1});
}

}  // namespace

ShardedOptimizer::ShardedOptimizer(const sdk::Kernels& ops, ShardStore& store, AccelGroup* sharding,
                                   int32_t sharding_rank, TensorGroup tensor, AccelGroup* pipeline,
                                   ExpertGroups experts)
    : ops_(ops),
      store_(store),
      sharding_(sharding),
      sharding_rank_(sharding_rank),
      tensor_(tensor),
      pipeline_(pipeline),
      experts_(experts) {
  if (store.host_resident()) cpu_adamw_ = std::make_unique<CpuAdamW>(fused_step_threads(ops.services()));
}

void ShardedOptimizer::clip_gradients(const AccelClipArgs& args) {
  const sdk::Services& s = ops_.services();
  // Gradients by memory space (shards may be in pinned host memory, the
  // host-owned ones on the device): one squared_norm and one clip_scale each.
  struct Space {
    const DLTensor* any = nullptr;
    std::vector<const DLTensor*> scaled;   // every gradient clip_scale scales
    std::vector<const DLTensor*> counted;  // those counted in this rank's norm
  };
  std::vector<Space> spaces;
  const auto space_of = [&](const DLTensor* t) -> Space& {
    for (Space& sp : spaces) {
      if (sdk::same_space(*sp.any, *t)) return sp;
    }
    spaces.push_back(Space{t, {}, {}});
    return spaces.back();
  };
  // What this rank counts of a gradient buffer holding unit elements `range`:
  // all of it on tensor and expert rank 0; elsewhere only the slices this
  // rank holds apart from its peers (tensor slices off tensor rank 0,
  // expert slices off expert rank 0). When the sharding group spans the
  // expert groups (ZeRO over the data group) its sum covers the expert
  // ranks: the first rank of SHARDING counts everything, each first rank
  // of EXPERT_DATA its expert slices.
  std::vector<std::unique_ptr<sdk::FlatView>> split_views;
  const bool experts_in_sharding = experts_.active() && ops_.shape(sharding_).size > 1;
  const bool first_expert_rank = experts_in_sharding || experts_.rank == 0;
  const auto count_ranges = [&](Space& sp, const DLTensor* grads, const UnitLayout& layout, sdk::FlatRange range,
                                CountedSlices which) {
    for (const sdk::FlatRange& r : split_ranges(layout.params, range, which)) {
      split_views.push_back(std::make_unique<sdk::FlatView>(*grads, r.begin, r.size()));
      sp.counted.push_back(split_views.back()->get());
    }
  };
  // `first_expert`: whether this rank counts what its expert group holds
  // alike (all but the expert slices).
  const auto count = [&](Space& sp, const DLTensor* grads, const UnitLayout& layout, sdk::FlatRange range,
                         bool first_expert) {
    if (layout.tied_copy) return;  // counted by its owning stage
    if (tensor_.rank == 0 && first_expert) {
      sp.counted.push_back(grads);
      return;
    }
    count_ranges(sp, grads, layout, range, CountedSlices{first_expert, tensor_.rank == 0});
  };
  for (int32_t u = 0; u < store_.num_units(); ++u) {
    if (ShardedUnit* unit = store_.sharded(u)) {
      Space& sp = space_of(&unit->grad_tensor());
      sp.scaled.push_back(&unit->grad_tensor());
      // A shard over EXPERT_DATA is equal over EXPERT outside its expert
      // slices: expert rank 0 counts those (the sum over SHARDING, every
      // data rank, then covers each element once).
      count(sp, &unit->grad_tensor(), unit->layout, unit->real,
            unit->over_expert_data ? experts_.rank == 0 : first_expert_rank);
    } else if (ReplicatedUnit* replicated = store_.replicated(u)) {
      const DLTensor* grads = ops_.storage(u).grads;
      if (grads == nullptr) continue;
      Space& sp = space_of(grads);
      sp.scaled.push_back(grads);
      const sdk::FlatRange all{0, replicated->layout.numel};
      if (sharding_rank_ == 0) {
        count(sp, grads, replicated->layout, all, first_expert_rank);
      } else if (experts_in_sharding && experts_.data_rank == 0 && tensor_.rank == 0) {
        count_ranges(sp, grads, replicated->layout, all, CountedSlices{false, true});
      }
    }
  }

  // This rank's part of the squared norm, summed on the host in double, then
  // over SHARDING as one f64 scalar.
  const AccelKernelServices& kernels = *s.table()->kernels;
  const DLDataType fp32{kDLFloat, 32, 1};
  double global = 0.0;
  std::vector<sdk::Buffer> scalars;  // per space: an fp32 scalar in that space
  for (Space& sp : spaces) {
    const bool host = sp.any->device.device_type == kDLCPU || sp.any->device.device_type == kDLCUDAHost;
    scalars.emplace_back(s, ACCEL_MEMORY_WORKSPACE, fp32, std::vector<int64_t>{},
                         host ? ACCEL_MEMORY_HOST : ACCEL_MEMORY_DEVICE, ACCEL_ALLOCATE_ZERO_FILL, nullptr,
                         "sharding squared norm");
    AccelSquaredNormArgs norm{};
    norm.struct_size = sizeof(norm);
    norm.inputs = sp.counted.data();
    norm.num_inputs = static_cast<int32_t>(sp.counted.size());
    norm.output = &scalars.back().tensor();
    norm.stream = args.stream;
    s.check(kernels.squared_norm(s.host(), &norm), "squared_norm");
    global += static_cast<double>(sdk::read_scalar<float>(s, scalars.back().tensor(), args.stream));
  }
  DLTensor total{};
  total.data = &global;
  total.device = {kDLCPU, 0};
  total.dtype = DLDataType{kDLFloat, 64, 1};
  if (ops_.shape(sharding_).size > 1) {
    ops_.all_reduce(sharding_, &total, ACCEL_REDUCE_SUM, "sharding grad norm all_reduce");
  }
  if (tensor_.size > 1) ops_.all_reduce(tensor_.group, &total, ACCEL_REDUCE_SUM, "sharding grad norm all_reduce (tensor)");
  if (pipeline_ != nullptr) ops_.all_reduce(pipeline_, &total, ACCEL_REDUCE_SUM, "sharding grad norm all_reduce (pipeline)");
  if (experts_.active() && !experts_in_sharding) {
    ops_.all_reduce(experts_.expert, &total, ACCEL_REDUCE_SUM, "sharding grad norm all_reduce (expert)");
  }

  // clip_scale per space with the global squared norm; the first also writes
  // total_norm (it does so even with nothing to scale).
  float global32 = static_cast<float>(global);
  const sdk::ScalarView global_view(&global32);
  if (spaces.empty()) {
    sdk::Buffer scalar(s, ACCEL_MEMORY_WORKSPACE, fp32, {}, ACCEL_MEMORY_HOST, 0, nullptr, "sharding squared norm");
    ops_.copy(global_view.get(), &scalar.tensor());
    AccelClipScaleArgs clip{};
    clip.struct_size = sizeof(clip);
    clip.total_squared_norm = &scalar.tensor();
    clip.total_norm = args.total_norm;
    clip.max_norm = args.max_norm;
    s.check(kernels.clip_scale(s.host(), &clip), "clip_scale");
    return;
  }
  for (size_t i = 0; i < spaces.size(); ++i) {
    ops_.copy(global_view.get(), &scalars[i].tensor());
    AccelClipScaleArgs clip{};
    clip.struct_size = sizeof(clip);
    clip.tensors = spaces[i].scaled.data();
    clip.num_tensors = static_cast<int32_t>(spaces[i].scaled.size());
    clip.total_squared_norm = &scalars[i].tensor();
    clip.total_norm = i == 0 ? args.total_norm : nullptr;
    clip.max_norm = args.max_norm;
    clip.stream = args.stream;
    s.check(kernels.clip_scale(s.host(), &clip), "clip_scale");
  }
}

void ShardedOptimizer::step(const AccelOptimizerStepArgs& args) {
  if (args.kind != ACCEL_OPTIMIZER_ADAMW) {
    throw Error(ACCEL_ERROR_UNSUPPORTED, "the sharded optimizer steps AdamW only");
  }
  if (store_.moment_formats().scaled()) {
    step_scaled(args);
    return;
  }
  const sdk::Services& s = ops_.services();
  const AccelKernelServices& kernels = *s.table()->kernels;
  // The fused host step reads the loss scaler's scalars once: a found_inf
  // skips the whole step (every output unchanged), as the service does.
  float grad_scale = 1.0f;
  if (cpu_adamw_) {
    float found_inf = 0.0f;
    const sdk::ScalarView scale_view(&grad_scale), inf_view(&found_inf);
    if (args.grad_scale != nullptr) ops_.copy(args.grad_scale, scale_view.get());
    if (args.found_inf != nullptr) ops_.copy(args.found_inf, inf_view.get());
    ops_.synchronize();
    if (found_inf != 0.0f) return;
  }
  // One adamw_step per run of equal weight decay over (param, grad, moments),
  // all four buffers laid out alike from element 0 of `range`.
  const auto step_runs = [&](const std::vector<ParamLayout>& params, sdk::FlatRange range, const DLTensor& param,
                             const DLTensor& grad, const DLTensor& exp_avg, const DLTensor& exp_avg_sq) {
    const bool fused = cpu_adamw_ && fp32_on_host(param) && fp32_on_host(grad) && fp32_on_host(exp_avg) &&
                       fp32_on_host(exp_avg_sq);
    for (const DecayRun& run : decay_runs(params, range, args.no_decay_roles)) {
      if (fused) {
        CpuAdamWHyper h;
        h.lr = args.lr;
        h.beta1 = args.beta1;
        h.beta2 = args.beta2;
        h.eps = args.eps;
        h.weight_decay = run.decay ? args.weight_decay : 0.0;
        h.step = args.step;
        h.grad_scale = grad_scale;
        cpu_adamw_->step(host_floats(param) + run.begin, host_floats(grad) + run.begin,
                         host_floats(exp_avg) + run.begin, host_floats(exp_avg_sq) + run.begin, run.count, h);
        continue;
      }
      const sdk::FlatView p(param, run.begin, run.count);
      const sdk::FlatView g(grad, run.begin, run.count);
      const sdk::FlatView m(exp_avg, run.begin, run.count);
      const sdk::FlatView v(exp_avg_sq, run.begin, run.count);
      AccelAdamWArgs adam{};
      adam.struct_size = sizeof(adam);
      adam.param = p.get();
      adam.grad = g.get();
      adam.exp_avg = m.get();
      adam.exp_avg_sq = v.get();
      adam.grad_scale = args.grad_scale;
      adam.found_inf = args.found_inf;
      adam.lr = args.lr;
      adam.beta1 = args.beta1;
      adam.beta2 = args.beta2;
      adam.eps = args.eps;
      adam.weight_decay = run.decay ? args.weight_decay : 0.0;
      adam.step = args.step;
      adam.stream = args.stream;
      s.check(kernels.adamw_step(s.host(), &adam), "adamw_step");
    }
  };
  if (MomentSwap* swap = store_.swap()) {
    // Swapped moments: one pass in unit order, the next units' reads and the
    // previous ones' writes overlapping each unit's step.
    swap->pass_all(true, [&](int32_t u, int64_t begin, int64_t count, float* exp_avg, float* exp_avg_sq) {
      // Shard elements [begin, begin + count); the padding past the real
      // part is never stepped.
      const ShardedUnit* unit = store_.sharded(u);
      const int64_t real = std::min(count, unit->real.size() - begin);
      if (real <= 0) return;
      // A master in the swap file is in the slot, after the moments.
      const sdk::FlatView p = unit->master_swapped ? sdk::FlatView(exp_avg_sq + count, real)
                                                   : sdk::FlatView(unit->master_tensor(), begin, real);
      const sdk::FlatView g(unit->grad_tensor(), begin, real);
      const sdk::FlatView m(exp_avg, real);
      const sdk::FlatView v(exp_avg_sq, real);
      step_runs(unit->layout.params, sdk::FlatRange{unit->real.begin + begin, unit->real.begin + begin + real},
                *p.get(), *g.get(), *m.get(), *v.get());
    });
  }
  for (int32_t u = 0; u < store_.num_units(); ++u) {
    if (ShardedUnit* unit = store_.sharded(u)) {
      if (unit->real.empty() || store_.swap()) continue;
      // Shard buffers start at the shard's first element, where its real part
      // starts too; the padding after it is never stepped.
      step_runs(unit->layout.params, unit->real, unit->master_tensor(), unit->grad_tensor(), unit->exp_avg.tensor(),
                unit->exp_avg_sq.tensor());
    } else if (ReplicatedUnit* replicated = store_.replicated(u)) {
      const sdk::Kernels::Materialized storage = ops_.storage(u);
      if (storage.params == nullptr || storage.grads == nullptr) {
        throw Error(ACCEL_ERROR_INTERNAL,
                    "host-owned unit " + replicated->layout.name + " has no materialised storage");
      }
      step_runs(replicated->layout.params, sdk::FlatRange{0, replicated->layout.numel}, *storage.params, *storage.grads,
                replicated->exp_avg.tensor(), replicated->exp_avg_sq.tensor());
    }
  }
}

// Scaled moments (scaled_moments.h): every parameter part this rank holds
// is stepped in two passes of adamw_step_scaled around one MAX all_reduce
// over SHARDING of every parameter's new amaxes, so each parameter's scales
// are the whole parameter's (one process's) on every rank. Offloaded
// partitions take the same path (the kernels run on host memory); the
// fused CpuAdamW steps fp32 moments only.
void ShardedOptimizer::step_scaled(const AccelOptimizerStepArgs& args) {
  const sdk::Services& s = ops_.services();
  const AccelKernelServices& kernels = *s.table()->kernels;
  if (!sdk::has_fn(&kernels, &AccelKernelServices::adamw_step_scaled)) {
    throw Error(ACCEL_ERROR_UNSUPPORTED, "this host has no adamw_step_scaled (ABI 1.8) for scaled moments");
  }
  // The scales are chosen on the host, so the verdict is read here once: a
  // skipped step must leave every moment and its scale as they were (the
  // kernels would skip, but new scales from the untouched amaxes would not).
  if (args.found_inf != nullptr) {
    float found_inf = 0.0f;
    const sdk::ScalarView inf_view(&found_inf);
    ops_.copy(args.found_inf, inf_view.get());
    ops_.synchronize();
    if (found_inf != 0.0f) return;
  }
  struct Piece {
    std::unique_ptr<sdk::FlatView> param, grad, m, v;
    float* m_scale;
    float* v_scale;
    size_t slot;  // index into the amax arrays: (unit, parameter) in model order
    bool decay;
  };
  std::vector<Piece> pieces;
  size_t slots = 0;
  const auto add = [&](const UnitLayout& layout, sdk::FlatRange held, const DLTensor& param, const DLTensor& grad,
                       const DLTensor& m, const DLTensor& v, std::vector<float>& m_scale,
                       std::vector<float>& v_scale) {
    for (const MomentPiece& p : moment_pieces(layout.params, held)) {
      const ParamLayout& info = layout.params[p.param];
      Piece piece;
      piece.param = std::make_unique<sdk::FlatView>(param, p.begin, p.count);
      piece.grad = std::make_unique<sdk::FlatView>(grad, p.begin, p.count);
      piece.m = std::make_unique<sdk::FlatView>(m, p.begin, p.count);
      piece.v = std::make_unique<sdk::FlatView>(v, p.begin, p.count);
      piece.m_scale = &m_scale.at(p.param);
      piece.v_scale = &v_scale.at(p.param);
      piece.slot = slots + p.param;
      piece.decay = (args.no_decay_roles & (1u << static_cast<uint32_t>(info.role))) == 0;
      pieces.push_back(std::move(piece));
    }
    slots += layout.params.size();
  };
  for (int32_t u = 0; u < store_.num_units(); ++u) {
    if (ShardedUnit* unit = store_.sharded(u)) {
      // Shard buffers start at the shard's first element, where its real
      // part starts too; the padding is never stepped.
      add(unit->layout, unit->real, unit->master_tensor(), unit->grad_tensor(), unit->exp_avg.tensor(),
          unit->exp_avg_sq.tensor(), unit->exp_avg_scale, unit->exp_avg_sq_scale);
    } else if (ReplicatedUnit* replicated = store_.replicated(u)) {
      const sdk::Kernels::Materialized storage = ops_.storage(u);
      if (storage.params == nullptr || storage.grads == nullptr) {
        throw Error(ACCEL_ERROR_INTERNAL,
                    "host-owned unit " + replicated->layout.name + " has no materialised storage");
      }
      add(replicated->layout, sdk::FlatRange{0, replicated->layout.numel}, *storage.params, *storage.grads,
          replicated->exp_avg.tensor(), replicated->exp_avg_sq.tensor(), replicated->exp_avg_scale,
          replicated->exp_avg_sq_scale);
    } else if (const UnitLayout* layout = store_.layout(u)) {
      slots += layout->params.size();
    }
  }
  // [m amaxes | v amaxes], in host memory: the scales are chosen there.
  sdk::Buffer amaxes = ops_.allocate(ACCEL_MEMORY_WORKSPACE, DLDataType{kDLFloat, 32, 1},
                                     static_cast<int64_t>(std::max<size_t>(1, 2 * slots)), ACCEL_MEMORY_HOST, true,
                                     "sharding moment amaxes");
  float* amax = host_floats(amaxes.tensor());
  const auto pass = [&](Piece& p, AccelScaledAdamWPass which, float* m_new, float* v_new) {
    float m_scale = *p.m_scale, v_scale = *p.v_scale;
    const sdk::ScalarView m_scale_view(&m_scale), v_scale_view(&v_scale);
    const sdk::ScalarView m_amax(amax + p.slot), v_amax(amax + slots + p.slot);
    const sdk::ScalarView m_new_view(m_new), v_new_view(v_new);
    AccelScaledAdamWArgs a{};
    a.struct_size = sizeof(a);
    a.param = p.param->get();
    a.grad = p.grad->get();
    a.exp_avg = p.m->get();
    a.exp_avg_sq = p.v->get();
    a.exp_avg_scale = m_scale_view.get();
    a.exp_avg_sq_scale = v_scale_view.get();
    if (which == ACCEL_SCALED_ADAMW_UPDATE) {
      a.exp_avg_amax = m_amax.get();
      a.exp_avg_sq_amax = v_amax.get();
    } else {
      a.exp_avg_new_scale = m_new_view.get();
      a.exp_avg_sq_new_scale = v_new_view.get();
    }
    a.grad_scale = args.grad_scale;  // found_inf: decided above
    a.lr = args.lr;
    a.beta1 = args.beta1;
    a.beta2 = args.beta2;
    a.eps = args.eps;
    a.weight_decay = p.decay ? args.weight_decay : 0.0;
    a.step = args.step;
    a.pass = which;
    a.stream = args.stream;
    s.check(kernels.adamw_step_scaled(s.host(), &a), "adamw_step_scaled");
  };
  for (Piece& p : pieces) pass(p, ACCEL_SCALED_ADAMW_UPDATE, nullptr, nullptr);
  ops_.synchronize();  // the amaxes are read on the host
  if (ops_.shape(sharding_).size > 1 && slots > 0) {
    ops_.all_reduce(sharding_, &amaxes.tensor(), ACCEL_REDUCE_MAX, "sharding moment amax all_reduce");
  }
  const MomentFormats& formats = store_.moment_formats();
  for (Piece& p : pieces) {
    float m_new = sdk::moment_scale(amax[p.slot], sdk::format_max(formats.exp_avg));
    float v_new = sdk::moment_scale(amax[slots + p.slot], sdk::format_max(formats.exp_avg_sq));
    pass(p, ACCEL_SCALED_ADAMW_STORE, &m_new, &v_new);
    *p.m_scale = m_new;
    *p.v_scale = v_new;
  }
}

}  // namespace accel::sharding
