// checkpoint_io.h — a sharding plugin's part of a checkpoint (accel/checkpoint.h): the
// parameters of the units it shards (MODEL space), the AdamW moments of every
// unit it steps (OPTIMIZER space, "exp_avg/NAME", "exp_avg_sq/NAME", the
// parameter's global shape) and its configuration as JSON (PLUGIN space,
// key "config", for information).
//
// Layout-free: tensors are stored by name and global offset, so any strategy
// at any world size loads them. state_dict_type SHARDED_STATE_DICT (and
// LOCAL_STATE_DICT, written the same way: an opaque flat shard cannot be
// resharded) — every rank of replica 0 puts its shard's part of every
// parameter as rectangles (sdk/flat_slices.hpp); FULL_STATE_DICT — replica 0
// all-gathers each unit's shards and its first rank puts whole tensors. Moments
// of host-owned units are put whole by the data group's first rank. Units
// holding tensor-parallel slices (megatron) put and get each slice at its
// global offset (sdk::local_to_global); a parameter every tensor rank holds
// whole is put by tensor rank 0; a unit's expert slices (expert_slices.h),
// whole on every tensor rank, by tensor rank 0 of EXPERT_DATA's first ranks,
// or, in a unit sharded over EXPERT_DATA (shard_store.h), by tensor rank 0
// of every rank of replica 0 (its other elements by expert rank 0). The consolidated model file gathers whole experts over
// EXPERT for world rank 0. Loading gets, on every
// rank, the rectangles of its own shard, whatever wrote them; a missing
// tensor is an error naming it. save_state runs on every rank (each rank's
// puts go to its own file). A shard's own master and moments are put as
// ACCEL_CHECKPOINT_PUT_STABLE (only the optimizer step changes them): the
// host writes them uncopied or copies them while the next step's forward
// runs. Gathered, dequantised and swapped-in stand-ins are plain puts.
// Thread-safety: loop thread only.
#pragma once

#include <accel/accel.h>
#include <accel/sdk/kernels.hpp>

#include <string>

#include "expert_slices.h"
#include "sharding_options.h"
#include "shard_store.h"

namespace accel::sharding {

class CheckpointIo {
 public:
  // `tensor_rank`: this rank's index in the tensor-parallel group when the
  // units hold tensor-parallel slices (megatron), else 0.
  // `experts`: the expert groups when units hold expert slices
  // (expert_slices.h), else inactive.
  CheckpointIo(const sdk::Kernels& ops, const ShardingOptions& config, ShardStore& store, AccelGroup* sharding,
               sdk::GroupShape replica, int32_t world_rank, std::string config_json, int32_t tensor_rank = 0,
               ExpertGroups experts = {});

  // With `model_file`, also the consolidated model file
  // (ACCEL_CHECKPOINT_EXPORT, DeepSpeed's
  // stage3_gather_16bit_weights_on_model_save) in that dtype: replica 0
  // all-gathers each sharded unit's masters and world rank 0 puts every
  // parameter whole, converted. World rank 0 then holds the converted model
  // (numel x dtype bytes) until save returns, one unit's fp32 gather beside
  // it at a time.
  void save(const AccelStateArgs& args, const DLDataType* model_file = nullptr);
  void load(const AccelStateArgs& args);

 private:
  const DLTensor* dequantized(const DLTensor& stored, const std::vector<MomentPiece>& pieces,
                              const std::vector<float>& scales, int64_t n, std::vector<sdk::Buffer>& keep) const;
  void load_scaled(const UnitLayout& layout, sdk::FlatRange held, int64_t first, int64_t n, sdk::Buffer& exp_avg,
                   std::vector<float>& exp_avg_scale, sdk::Buffer& exp_avg_sq, std::vector<float>& exp_avg_sq_scale);

  const sdk::Kernels& ops_;
  const ShardingOptions& config_;
  std::string config_json_;  // the strategy's resolved configuration, put for information
  ShardStore& store_;
  int32_t sharding_rank_;
  sdk::GroupShape replica_;
  int32_t world_rank_;
  int32_t tensor_rank_;
  ExpertGroups experts_;
};

}  // namespace accel::sharding
