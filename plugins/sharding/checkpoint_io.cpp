// checkpoint_io.cpp — saving and loading a sharding plugin's tensors by global offset (see
// checkpoint_io.h).
#include "checkpoint_io.h"

#include <accel/sdk/error.hpp>
#include <accel/sdk/flat_slices.hpp>
#include <accel/sdk/tensor.hpp>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "expert_slices.h"

namespace accel::sharding {

namespace {

// One tensor kind of a unit: where it lives and under which name it is saved.
struct Stored {
  AccelCheckpointSpace space;
  const char* prefix;  // "" for parameters, "exp_avg/" for moments
};
constexpr Stored kParams{ACCEL_CHECKPOINT_MODEL, ""};
constexpr Stored kExpAvg{ACCEL_CHECKPOINT_OPTIMIZER, "exp_avg/"};
constexpr Stored kExpAvgSq{ACCEL_CHECKPOINT_OPTIMIZER, "exp_avg_sq/"};
constexpr Stored kModelFile{ACCEL_CHECKPOINT_EXPORT, ""};

// Views handed to `put` stay alive until save_state returns (the host may
// read a slice until then); NULL when loading (`get` completes in the call).
using KeptViews = std::vector<std::unique_ptr<sdk::ShapedView>>;

// put (save) or get (load) one rectangle of a parameter-shaped tensor held
// `at` elements into `buffer`. `stable`: `buffer` is a unit's own master or
// moments, which only the optimizer step changes (ACCEL_CHECKPOINT_PUT_STABLE:
// the host may copy it after the save returns, or write it uncopied).
void transfer(const sdk::Services& s, KeptViews* kept, const Stored& kind, const ParamLayout& param,
              const sdk::Rectangle& rect, const DLTensor& buffer, int64_t at, bool stable = false) {
  const bool save = kept != nullptr;
  const std::string name = std::string(kind.prefix) + param.name;
  auto view = std::make_unique<sdk::ShapedView>(buffer, at, rect.shape);
  const sdk::ShapedView& local = *view;
  if (save) kept->push_back(std::move(view));
  AccelCheckpointSliceArgs args{};
  args.struct_size = sizeof(args);
  args.space = kind.space;
  args.ndim = static_cast<int32_t>(param.global_shape.size());
  args.name = name.c_str();
  args.global_shape = param.global_shape.data();
  args.global_offset = rect.offset.data();
  args.local = local.get();
  if (save && stable) args.flags = ACCEL_CHECKPOINT_PUT_STABLE;
  const AccelCheckpointServices& checkpoint = *s.table()->checkpoint;
  s.check(save ? checkpoint.put(s.host(), &args) : checkpoint.get(s.host(), &args), (save ? "put " : "get ") + name);
}

// Which parameters a rank puts when saving, so that each element is put
// once: whole ones, slices of tensor-parallel splits, expert slices.
struct Puts {
  bool whole = true;
  bool tensor_slices = true;
  bool expert_slices = true;

  bool operator()(const ParamLayout& p) const {
    return !p.is_split() ? whole : is_expert_slice(p) ? expert_slices : tensor_slices;
  }
  bool any() const { return whole || tensor_slices || expert_slices; }
};

// Every parameter's part of `range` of a unit's flat buffer, where `buffer`
// element 0 is unit element `buffer_begin`: rectangles of the local slice,
// put or got by global offset. Saving puts only the parameters `puts`
// takes (another rank puts the others).
void transfer_range(const sdk::Services& s, KeptViews* kept, const Stored& kind, const UnitLayout& unit,
                    sdk::FlatRange range, const DLTensor& buffer, int64_t buffer_begin, Puts puts = {},
                    bool stable = false) {
  for (const ParamLayout& p : unit.params) {
    if (!puts(p)) continue;
    const sdk::FlatRange part = sdk::intersect(range, sdk::FlatRange{p.flat_offset, p.flat_offset + p.numel});
    if (part.empty()) continue;
    for (const sdk::Rectangle& local :
         sdk::flat_range_to_rectangles(p.local_shape, part.begin - p.flat_offset, part.size())) {
      for (const sdk::Rectangle& rect : sdk::local_to_global(p.split, local)) {
        transfer(s, kept, kind, p, rect, buffer, p.flat_offset + rect.flat_begin - buffer_begin, stable);
      }
    }
  }
}

// The consolidated model file (checkpoint_io.h): every unit's full
// parameters, converted to `dtype` and put whole by world rank 0 into
// `converted`, kept (with their views) until the caller's save returns.
// Expert slices (split along dim 0 over EXPERT, expert rank r holding the
// r-th block of experts) are all-gathered over EXPERT and put whole.
void put_model_file(const sdk::Kernels& ops, const ShardingOptions& config, ShardStore& store,
                    const ExpertGroups& experts, int32_t world_rank, DLDataType dtype, KeptViews& kept,
                    std::vector<sdk::Buffer>& converted) {
  const DLDataType fp32{kDLFloat, 32, 1};
  for (int32_t u = 0; u < store.num_units(); ++u) {
    if (store.layout(u) == nullptr) continue;  // another pipeline stage's
    ShardedUnit* unit = store.sharded(u);
    const UnitLayout& layout = *store.layout(u);
    const DLTensor* full = nullptr;
    sdk::Buffer gathered;  // the unit's fp32 masters, when only shards exist
    AccelMemoryPlace place = ACCEL_MEMORY_DEVICE;
    if (unit == nullptr || unit->host_params) {
      full = ops.storage(u).params;
      if (full == nullptr) throw sdk::Error(ACCEL_ERROR_INTERNAL, "unit " + layout.name + ": no parameters to save");
    } else {
      place = config.shard_place();
      gathered = ops.allocate(ACCEL_MEMORY_WORKSPACE, fp32, unit->shards.padded_numel(), place, false,
                              "sharding model file all_gather");
      sdk::Buffer read_in;  // a master in the NVMe swap
      const DLTensor* master = unit->master_or_null();
      if (unit->master_swapped) {
        read_in = ops.allocate(ACCEL_MEMORY_WORKSPACE, fp32, unit->shards.shard_numel(), place, false,
                               "sharding model file master read in");
        store.swap()->read_masters(u, static_cast<float*>(read_in.tensor().data));
        master = &read_in.tensor();
      }
      ops.all_gather(unit->group, master, &gathered.tensor(), "sharding model file all_gather");
      full = &gathered.tensor();
    }
    const sdk::FlatView real(*full, 0, layout.numel);
    sdk::Buffer peers;  // every expert rank's unit, side by side
    const bool split_experts = experts.active() && holds_expert_slices(layout);
    if (split_experts) {
      peers = ops.allocate(ACCEL_MEMORY_WORKSPACE, full->dtype, experts.size * layout.numel, place, false,
                           "sharding model file experts all_gather");
      ops.all_gather(experts.expert, real.get(), &peers.tensor(), "sharding model file experts all_gather");
    }
    if (world_rank != 0) continue;
    converted.push_back(ops.allocate(ACCEL_MEMORY_WORKSPACE, dtype, layout.numel, place, false, "sharding model file"));
    ops.convert(real.get(), &converted.back().tensor());
    transfer_range(ops.services(), &kept, kModelFile, layout, sdk::FlatRange{0, layout.numel},
                   converted.back().tensor(), 0, Puts{true, true, !split_experts});
    if (!split_experts) continue;
    for (const ParamLayout& p : layout.params) {
      if (!is_expert_slice(p)) continue;
      if (p.split.dim != 0 || p.split.blocks != 1 || p.global_shape.at(0) != p.local_shape.at(0) * experts.size) {
        throw sdk::Error(ACCEL_ERROR_INTERNAL, p.name + ": an expert slice not split along dim 0 over EXPERT");
      }
      converted.push_back(
          ops.allocate(ACCEL_MEMORY_WORKSPACE, dtype, experts.size * p.numel, place, false, "sharding model file"));
      for (int32_t r = 0; r < experts.size; ++r) {
        const sdk::FlatView from(peers.tensor(), r * layout.numel + p.flat_offset, p.numel);
        const sdk::FlatView into(converted.back().tensor(), r * p.numel, p.numel);
        ops.convert(from.get(), into.get());
      }
      const sdk::Rectangle whole{std::vector<int64_t>(p.global_shape.size(), 0), p.global_shape, 0};
      transfer(ops.services(), &kept, kModelFile, p, whole, converted.back().tensor(), 0);
    }
  }
}

}  // namespace

// A scaled moment buffer's fp32 values (n elements), in a buffer `keep`
// holds until the save returns.
const DLTensor* CheckpointIo::dequantized(const DLTensor& stored, const std::vector<MomentPiece>& pieces,
                                          const std::vector<float>& scales, int64_t n,
                                          std::vector<sdk::Buffer>& keep) const {
  keep.push_back(ops_.allocate(ACCEL_MEMORY_WORKSPACE, DLDataType{kDLFloat, 32, 1}, n, config_.shard_place(), true,
                               "sharding dequantised moments"));
  dequantize_moments(ops_, stored, pieces, scales, keep.back().tensor());
  return &keep.back().tensor();
}

// Reads both moments of unit elements `held` (the buffers start at unit
// element `first`) as fp32 and stores them in their scaled formats.
void CheckpointIo::load_scaled(const UnitLayout& layout, sdk::FlatRange held, int64_t first, int64_t n,
                               sdk::Buffer& exp_avg, std::vector<float>& exp_avg_scale, sdk::Buffer& exp_avg_sq,
                               std::vector<float>& exp_avg_sq_scale) {
  const sdk::Services& s = ops_.services();
  const std::vector<MomentPiece> pieces = moment_pieces(layout.params, sdk::FlatRange{first, first + n});
  const std::pair<Stored, std::pair<sdk::Buffer*, std::vector<float>*>> moments[] = {
      {kExpAvg, {&exp_avg, &exp_avg_scale}}, {kExpAvgSq, {&exp_avg_sq, &exp_avg_sq_scale}}};
  for (const auto& [kind, target] : moments) {
    sdk::Buffer values = ops_.allocate(ACCEL_MEMORY_WORKSPACE, DLDataType{kDLFloat, 32, 1}, n, config_.shard_place(),
                                       true, "sharding moments read in");
    transfer_range(s, nullptr, kind, layout, held, values.tensor(), first);
    quantize_moments(ops_, values.tensor(), pieces, *target.second, target.first->tensor());
  }
}

CheckpointIo::CheckpointIo(const sdk::Kernels& ops, const ShardingOptions& config, ShardStore& store,
                           AccelGroup* sharding, sdk::GroupShape replica, int32_t world_rank, std::string config_json,
                           int32_t tensor_rank, ExpertGroups experts)
    : ops_(ops),
      config_(config),
      config_json_(std::move(config_json)),
      store_(store),
      sharding_rank_(ops.shape(sharding).rank),
      replica_(replica),
      world_rank_(world_rank),
      tensor_rank_(tensor_rank),
      experts_(experts) {}

void CheckpointIo::save(const AccelStateArgs&, const DLDataType* model_file) {
  const sdk::Services& s = ops_.services();
  // FULL_STATE_DICT: the gathered buffers must outlive every put (the host
  // may read them until save_state returns), so rank 0 keeps them here, in
  // host memory (FSDP's offload_to_cpu): the device holds one gathered
  // tensor at a time, never the whole model.
  std::vector<sdk::Buffer> gathered;
  KeptViews kept;
  // Each element is put once, by the first rank of every group holding it
  // alike: whole parameters by tensor rank 0, the slices of split ones by
  // every tensor rank; expert slices, whole over the tensor group (megatron
  // splits the attention around them), by tensor rank 0 too; in host-owned
  // units, whole parameters and tensor slices by the data group's first
  // rank, expert slices by each expert group's ranks in the first of
  // EXPERT_DATA.
  const bool tensor_first = tensor_rank_ == 0;
  const Puts sharded_puts{tensor_first, true, tensor_first};
  // A shard over EXPERT_DATA is its expert group's alike but for the experts.
  const Puts expert_data_puts{tensor_first && experts_.rank == 0, experts_.rank == 0, tensor_first};
  const bool data_first = replica_.rank == 0 && sharding_rank_ == 0;
  const Puts replicated_puts{data_first && tensor_first, data_first, experts_.data_rank == 0 && tensor_first};
  for (int32_t u = 0; u < store_.num_units(); ++u) {
    // A tied copy's state is its owning stage's to save (equal to it).
    if (const UnitLayout* layout = store_.layout(u); layout != nullptr && layout->tied_copy) continue;
    if (ShardedUnit* unit = store_.sharded(u)) {
      if (replica_.rank != 0) continue;  // replicas hold equal shards: replica 0 saves
      const Puts& puts = unit->over_expert_data ? expert_data_puts : sharded_puts;
      const int64_t n = unit->shards.shard_numel();
      // Null while in the NVMe swap: read back below.
      const DLTensor* master = unit->master_or_null();
      const DLTensor* exp_avg = unit->exp_avg.tensor_or_null();
      const DLTensor* exp_avg_sq = unit->exp_avg_sq.tensor_or_null();
      // The unit's own buffers, which only the optimizer step changes: put
      // as stable. Their stand-ins below (dequantised or swapped in) are not.
      const DLTensor* const own[] = {master, exp_avg, exp_avg_sq};
      const auto is_own = [&own](const DLTensor* t) {
        return t != nullptr && std::find(std::begin(own), std::end(own), t) != std::end(own);
      };
      if (!unit->exp_avg_scale.empty()) {
        // Scaled moments are saved as their exact fp32 values (scaled_moments.h).
        const std::vector<MomentPiece> pieces = moment_pieces(unit->layout.params, unit->real);
        exp_avg = dequantized(unit->exp_avg.tensor(), pieces, unit->exp_avg_scale, n, gathered);
        exp_avg_sq = dequantized(unit->exp_avg_sq.tensor(), pieces, unit->exp_avg_sq_scale, n, gathered);
      }
      std::unique_ptr<sdk::FlatView> swapped_views[3];
      if (MomentSwap* swap = store_.swap(); swap && swap->swapped(u)) {
        // Read back from the swap file into host memory the host's writer
        // may read until save_state returns: a save holds the moments (and
        // a swapped master) once.
        const int arrays = unit->master_swapped ? 3 : 2;
        gathered.push_back(ops_.allocate(ACCEL_MEMORY_WORKSPACE, DLDataType{kDLFloat, 32, 1}, arrays * n,
                                         ACCEL_MEMORY_HOST, false, "sharding swapped-in moments"));
        auto* into = static_cast<float*>(gathered.back().tensor().data);
        swap->pass({u}, false, [&](int32_t, int64_t begin, int64_t count, float* m, float*) {
          for (int a = 0; a < arrays; ++a) {  // the slot's arrays follow each other, `count` apart
            std::memcpy(into + a * n + begin, m + a * count, static_cast<size_t>(count) * sizeof(float));
          }
        });
        for (int a = 0; a < arrays; ++a) {
          swapped_views[a] = std::make_unique<sdk::FlatView>(gathered.back().tensor(), a * n, n);
        }
        exp_avg = swapped_views[0]->get();
        exp_avg_sq = swapped_views[1]->get();
        if (unit->master_swapped) master = swapped_views[2]->get();
      }
      const std::pair<Stored, const DLTensor*> kinds[] = {{kParams, master}, {kExpAvg, exp_avg}, {kExpAvgSq, exp_avg_sq}};
      for (const auto& [kind, shard] : kinds) {
        // Parameters the host keeps (ZeRO-1/2) are the host's to save: it
        // writes them whole, equal to the masters after every step.
        if (unit->host_params && shard == master) continue;
        if (config_.state_dict_type != StateDictType::full) {
          transfer_range(s, &kept, kind, unit->layout, unit->real, *shard, unit->shard_begin(), puts, is_own(shard));
          continue;
        }
        sdk::Buffer full = ops_.allocate(ACCEL_MEMORY_WORKSPACE, shard->dtype, unit->shards.padded_numel(),
                                         config_.shard_place(), false, "sharding full state dict");
        ops_.all_gather(unit->group, shard, &full.tensor(), "sharding state dict all_gather");
        if (unit->shard_index != 0) continue;  // `full` is freed here
        if (!sdk::is_host(full.tensor())) {
          sdk::Buffer on_host =
              ops_.allocate(ACCEL_MEMORY_WORKSPACE, shard->dtype, unit->shards.padded_numel(),
                            ACCEL_MEMORY_HOST, false, "sharding full state dict (host)");
          ops_.copy(&full.tensor(), &on_host.tensor());
          ops_.synchronize();
          full = std::move(on_host);  // frees the device copy
        }
        transfer_range(s, &kept, kind, unit->layout, sdk::FlatRange{0, unit->layout.numel}, full.tensor(), 0, puts);
        gathered.push_back(std::move(full));
      }
    } else if (ReplicatedUnit* replicated = store_.replicated(u)) {
      if (!replicated_puts.any()) continue;
      const sdk::FlatRange all{0, replicated->layout.numel};
      const DLTensor* exp_avg = &replicated->exp_avg.tensor();
      const DLTensor* exp_avg_sq = &replicated->exp_avg_sq.tensor();
      const bool own_moments = replicated->exp_avg_scale.empty();  // else dequantised copies
      if (!replicated->exp_avg_scale.empty()) {
        const std::vector<MomentPiece> pieces = moment_pieces(replicated->layout.params, all);
        exp_avg = dequantized(*exp_avg, pieces, replicated->exp_avg_scale, all.size(), gathered);
        exp_avg_sq = dequantized(*exp_avg_sq, pieces, replicated->exp_avg_sq_scale, all.size(), gathered);
      }
      transfer_range(s, &kept, kExpAvg, replicated->layout, all, *exp_avg, 0, replicated_puts, own_moments);
      transfer_range(s, &kept, kExpAvgSq, replicated->layout, all, *exp_avg_sq, 0, replicated_puts, own_moments);
    }
  }
  if (model_file != nullptr && replica_.rank == 0) {  // replicas hold equal shards
    put_model_file(ops_, config_, store_, experts_, world_rank_, *model_file, kept, gathered);
  }
  if (world_rank_ == 0) {
    s.check(s.table()->checkpoint->put_string(s.host(), ACCEL_CHECKPOINT_PLUGIN, "config", config_json_.c_str()),
            "put_string config");
  }
  // Returning ends the host's reads of `gathered` and `kept`.
}

void CheckpointIo::load(const AccelStateArgs&) {
  const sdk::Services& s = ops_.services();
  MomentSwap* swap = store_.swap();
  for (int32_t u = 0; u < store_.num_units(); ++u) {
    if (ShardedUnit* unit = store_.sharded(u)) {
      if (!unit->master_swapped) {
        transfer_range(s, nullptr, kParams, unit->layout, unit->real, unit->master_tensor(), unit->shard_begin());
      }
      if (swap && swap->swapped(u)) continue;  // below, through the swap file
      if (!unit->exp_avg_scale.empty()) {
        load_scaled(unit->layout, unit->real, unit->shard_begin(), unit->shards.shard_numel(), unit->exp_avg,
                    unit->exp_avg_scale, unit->exp_avg_sq, unit->exp_avg_sq_scale);
        continue;
      }
      transfer_range(s, nullptr, kExpAvg, unit->layout, unit->real, unit->exp_avg.tensor(), unit->shard_begin());
      transfer_range(s, nullptr, kExpAvgSq, unit->layout, unit->real, unit->exp_avg_sq.tensor(), unit->shard_begin());
    } else if (ReplicatedUnit* replicated = store_.replicated(u)) {
      const sdk::FlatRange all{0, replicated->layout.numel};
      if (!replicated->exp_avg_scale.empty()) {
        load_scaled(replicated->layout, all, 0, all.size(), replicated->exp_avg, replicated->exp_avg_scale,
                    replicated->exp_avg_sq, replicated->exp_avg_sq_scale);
        continue;
      }
      transfer_range(s, nullptr, kExpAvg, replicated->layout, all, replicated->exp_avg.tensor(), 0);
      transfer_range(s, nullptr, kExpAvgSq, replicated->layout, all, replicated->exp_avg_sq.tensor(), 0);
    }
  }
  if (swap) {
    swap->pass_all(true, [&](int32_t u, int64_t begin, int64_t count, float* m, float* v) {
      const ShardedUnit* unit = store_.sharded(u);
      std::fill(m, m + MomentSwap::arrays(unit->master_swapped) * count, 0.0f);  // the padding stays zero
      const sdk::FlatView exp_avg(m, count);
      const sdk::FlatView exp_avg_sq(v, count);
      const sdk::FlatView master(v + count, count);  // read only when master_swapped
      const int64_t at = unit->shard_begin() + begin;  // unit element of the piece's first
      const sdk::FlatRange piece = sdk::intersect(unit->real, sdk::FlatRange{at, at + count});
      if (piece.empty()) return;
      if (unit->master_swapped) transfer_range(s, nullptr, kParams, unit->layout, piece, *master.get(), at);
      transfer_range(s, nullptr, kExpAvg, unit->layout, piece, *exp_avg.get(), at);
      transfer_range(s, nullptr, kExpAvgSq, unit->layout, piece, *exp_avg_sq.get(), at);
    });
  }
}

}  // namespace accel::sharding
