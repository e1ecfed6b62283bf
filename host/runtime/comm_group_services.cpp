// The group area of the comm services (accel/comm.h): the mesh plugins
// declare while planning, the standard groups it resolves to, and groups
// plugins create, split and destroy. Every group handle a plugin holds is an
// entry of the context's group table (comm_checks.h): get_group hands out
// the standard entries, create/split add one, destroy_group removes it (so
// a later use of that handle is refused as stale), and each entry carries
// its group's collective sequence check.
//
// The mesh resolves to tensor groups of adjacent ranks (Megatron), data,
// sharding and replica groups across them within one pipeline stage, and
// pipeline groups (one rank per stage, in stage order) across stages.
//
// Thread-safety: set_mesh, create/split/destroy on the loop thread;
// get_group and group_info from any thread (the table is locked).
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <vector>

#include "host/comm/process_group.h"
#include "host/runtime/comm_checks.h"
#include "host/runtime/host_context.h"
#include "host/runtime/service_support.h"

namespace accel::runtime {
namespace {

// A table entry for `group` (owned unless `borrowed`), with its sequence
// check: collective over the group's ranks, like the group's creation.
std::shared_ptr<GroupEntry> make_entry(HostContext& context, comm::ProcessGroup* borrowed,
                                       std::unique_ptr<comm::ProcessGroup> owned) {
  auto entry = std::make_shared<GroupEntry>();
  entry->group = borrowed ? borrowed : owned.get();
  entry->owned = std::move(owned);
  for (int r : entry->group->world_ranks()) entry->ranks.push_back(static_cast<int32_t>(r));
  entry->sequence = std::make_unique<comm::SequenceCheck>(
      entry->group->mpi_comm(), entry->group->name(), entry->group->world_ranks(),
      entry->group->options().timeout_ms, handles_of(context).verify.each_op);
  return entry;
}

// A plugin-made group's handle (NULL for a rank the group does not include).
AccelGroup* add_plugin_group(HostContext& context, std::unique_ptr<comm::ProcessGroup> made) {
  if (!made) return nullptr;
  return group_handle(handles_of(context).groups.add(make_entry(context, nullptr, std::move(made))));
}

AccelStatus set_mesh(AccelHost* host, const AccelMeshSpec* mesh) {
  return call_service("comm.set_mesh", [&] {
    ACCEL_REQUIRE_ARGS(mesh, AccelMeshSpec, replica_size);
    HostContext& context = context_of(host);
    if (!context.planning) fail(ACCEL_ERROR_FAILED_PRECONDITION, "set_mesh is allowed only inside plan_model");
    auto merge = [&](int32_t& mine, int32_t theirs, const char* what) {
      if (theirs == 0) return;
      if (mine != 0 && mine != theirs) {
        fail(ACCEL_ERROR_INVALID_ARGUMENT, std::string(what) + " size " + std::to_string(theirs) +
                                               " conflicts with " + std::to_string(mine) + " declared before");
      }
      mine = theirs;
    };
    merge(context.mesh.tensor_size, mesh->tensor_size, "tensor");
    merge(context.mesh.pipeline_size, mesh->pipeline_size, "pipeline");
    merge(context.mesh.sharding_size, mesh->sharding_size, "sharding");
    merge(context.mesh.replica_size, mesh->replica_size, "replica");
    if (ACCEL_STRUCT_HAS_FIELD(mesh, AccelMeshSpec, reserved)) {
      if (mesh->reserved != 0) fail(ACCEL_ERROR_INVALID_ARGUMENT, "AccelMeshSpec.reserved must be 0");
      if (mesh->context_size < 0) {
        fail(ACCEL_ERROR_INVALID_ARGUMENT, "context size " + std::to_string(mesh->context_size) + " is negative");
      }
      merge(context.mesh.context_size, mesh->context_size, "context");
    }
    if (ACCEL_STRUCT_HAS_FIELD(mesh, AccelMeshSpec, reserved2)) {
      if (mesh->reserved2 != 0) fail(ACCEL_ERROR_INVALID_ARGUMENT, "AccelMeshSpec.reserved2 must be 0");
      if (mesh->expert_size < 0) {
        fail(ACCEL_ERROR_INVALID_ARGUMENT, "expert size " + std::to_string(mesh->expert_size) + " is negative");
      }
      merge(context.mesh.expert_size, mesh->expert_size, "expert");
    }
  });
}

AccelStatus get_group(AccelHost* host, AccelGroupKind kind, AccelGroup** group) {
  return call_service("comm.get_group", [&] {
    if (!group) fail(ACCEL_ERROR_INVALID_ARGUMENT, "group is NULL");
    HostContext& context = context_of(host);
    const auto it = context.standard_groups.find(static_cast<int>(kind));
    if (it == context.standard_groups.end()) {
      fail(ACCEL_ERROR_FAILED_PRECONDITION,
           "standard group " + std::to_string(kind) + " does not exist yet (groups exist from setup on)");
    }
    *group = it->second;
  });
}

AccelStatus group_info(AccelHost* host, const AccelGroup* group, AccelGroupInfo* info) {
  return call_service("comm.group_info", [&] {
    ACCEL_REQUIRE_ARGS(info, AccelGroupInfo, ranks);
    HostContext& context = context_of(host);
    const ResolvedGroup g = resolve_group(context, group);
    if (!g.entry) fail(ACCEL_ERROR_FAILED_PRECONDITION, "the world group's handle exists from setup on");
    info->rank = g.group->rank();
    info->size = g.group->size();
    info->ranks = g.entry->ranks.data();  // the entry lives as long as the handle
  });
}

AccelStatus create_group(AccelHost* host, const int32_t* ranks, int32_t num_ranks, AccelGroup** group) {
  return call_service("comm.create_group", [&] {
    if (!ranks || num_ranks <= 0 || !group) fail(ACCEL_ERROR_INVALID_ARGUMENT, "empty rank list or NULL group");
    HostContext& context = context_of(host);
    const ResolvedGroup world = resolve_group(context, nullptr);
    const std::vector<int> list(ranks, ranks + num_ranks);
    *group = add_plugin_group(context, world.group->new_group(list, "plugin group"));
  });
}

AccelStatus split_group(AccelHost* host, AccelGroup* parent, int32_t color, int32_t key, AccelGroup** group) {
  return call_service("comm.split_group", [&] {
    if (!group) fail(ACCEL_ERROR_INVALID_ARGUMENT, "group is NULL");
    HostContext& context = context_of(host);
    const ResolvedGroup g = resolve_group(context, parent, "parent");
    *group = add_plugin_group(context, g.group->split(color, key, "plugin split"));
  });
}

AccelStatus destroy_group(AccelHost* host, AccelGroup* group) {
  return call_service("comm.destroy_group", [&] {
    if (!group) fail(ACCEL_ERROR_INVALID_ARGUMENT, "group is NULL (the world belongs to the host)");
    HostContext& context = context_of(host);
    const ResolvedGroup g = resolve_group(context, group);
    if (g.entry->host_owned) fail(ACCEL_ERROR_INVALID_ARGUMENT, "standard groups belong to the host");
    handles_of(context).groups.remove(handle_value(group), nullptr);
  });
}

void refuse_tensor_groups_across_nodes(const HostContext& context, int tensor_size) {
  const std::vector<int>* nodes = context.world->options().world_nodes.get();
  if (tensor_size < 2 || context.tensor_parallel_across_nodes || !nodes) return;
  // Tensor peers are blocks of adjacent world ranks (accel/comm.h); every
  // rank checks every block, so all of them refuse alike.
  for (size_t first = 0; first + static_cast<size_t>(tensor_size) <= nodes->size(); first += tensor_size) {
    for (size_t r = first + 1; r < first + static_cast<size_t>(tensor_size); ++r) {
      if ((*nodes)[r] == (*nodes)[first]) continue;
      throw std::runtime_error(
          "mesh: the tensor-parallel group of world ranks " + std::to_string(first) + "-" +
          std::to_string(first + tensor_size - 1) + " spans nodes " + std::to_string((*nodes)[first]) + " and " +
          std::to_string((*nodes)[r]) + " (tensor size " + std::to_string(tensor_size) + ", " +
          std::to_string(context.identity.local_world_size) +
          " ranks on this node): tensor parallelism all-reduces activations in every layer; run a multiple of " +
          std::to_string(tensor_size) + " ranks per node, or pass --tensor-parallel-across-nodes to accept it");
    }
  }
}

}  // namespace

void fill_group_services(AccelCommServices& t) {
  t.set_mesh = &set_mesh;
  t.get_group = &get_group;
  t.group_info = &group_info;
  t.create_group = &create_group;
  t.split_group = &split_group;
  t.destroy_group = &destroy_group;
}

void resolve_standard_groups(HostContext& context) {
  comm::ProcessGroup& world = *context.world;
  CommHandles& handles = handles_of(context);
  handles.verify = parse_comm_verify(std::getenv("ACCEL_COMM_VERIFY"));
  AccelMeshSpec& mesh = context.mesh;
  const int world_size = world.size();
  const int tensor_size = std::max(1, mesh.tensor_size);
  const int pipeline_size = std::max(1, mesh.pipeline_size);
  if (world_size % (tensor_size * pipeline_size) != 0) {
    throw std::runtime_error("mesh tensor size " + std::to_string(tensor_size) + " x pipeline size " +
                             std::to_string(pipeline_size) + " does not divide the world size " +
                             std::to_string(world_size));
  }
  refuse_tensor_groups_across_nodes(context, tensor_size);
  const int data_size = world_size / (tensor_size * pipeline_size);
  mesh.tensor_size = tensor_size;
  mesh.pipeline_size = pipeline_size;
  if (mesh.sharding_size == 0 && mesh.replica_size == 0) mesh.sharding_size = 1;
  if (mesh.sharding_size == 0) mesh.sharding_size = data_size / std::max(1, mesh.replica_size);
  if (mesh.replica_size == 0) mesh.replica_size = data_size / std::max(1, mesh.sharding_size);
  if (mesh.sharding_size * mesh.replica_size != data_size) {
    throw std::runtime_error("mesh sharding " + std::to_string(mesh.sharding_size) + " x replica " +
                             std::to_string(mesh.replica_size) + " does not equal the data-parallel size " +
                             std::to_string(data_size) + " (world " + std::to_string(world_size) + " / tensor " +
                             std::to_string(tensor_size) + " / pipeline " + std::to_string(pipeline_size) + ")");
  }
  // Context and expert groups are carved out of the data index: each size
  // (0: 1) must divide it.
  const auto inside_data = [&](int32_t& size, const char* what) {
    size = std::max(1, size);
    if (data_size % size == 0) return size;
    throw std::runtime_error("mesh " + std::string(what) + " size " + std::to_string(size) +
                             " does not divide the data-parallel size " + std::to_string(data_size) + " (world " +
                             std::to_string(world_size) + " / tensor " + std::to_string(tensor_size) +
                             " / pipeline " + std::to_string(pipeline_size) + ")");
  };
  const int context_size = inside_data(mesh.context_size, "context");
  const int expert_size = inside_data(mesh.expert_size, "expert");
  const int rank = world.rank();
  auto standard = [&](comm::ProcessGroup* borrowed, std::unique_ptr<comm::ProcessGroup> owned) {
    std::shared_ptr<GroupEntry> entry = make_entry(context, borrowed, std::move(owned));
    entry->host_owned = true;
    return group_handle(handles.groups.add(std::move(entry)));
  };
  AccelGroup* world_handle = standard(&world, nullptr);
  context.standard_groups[ACCEL_GROUP_WORLD] = world_handle;
  // r = (pipeline_index * data_size + data_index) * tensor_size + tensor_index,
  // data_index = replica_index * sharding_size + sharding_index (accel/comm.h).
  // Each split's colour names what its members share; the key orders them.
  const int tensor_index = rank % tensor_size;
  const int data_index = (rank / tensor_size) % data_size;
  const int pipeline_index = rank / (tensor_size * data_size);
  const int sharding_index = data_index % mesh.sharding_size, replica_index = data_index / mesh.sharding_size;
  const int stage_slot = pipeline_index * tensor_size + tensor_index;  // same stage, same tensor slice
  context.standard_groups[ACCEL_GROUP_DATA] = tensor_size == 1 && pipeline_size == 1
                                                  ? world_handle
                                                  : standard(nullptr, world.split(stage_slot, rank, "data"));
  context.standard_groups[ACCEL_GROUP_SHARDING] = standard(
      nullptr, world.split(stage_slot * mesh.replica_size + replica_index, rank, "sharding"));
  context.standard_groups[ACCEL_GROUP_REPLICA] = standard(
      nullptr, world.split(stage_slot * mesh.sharding_size + sharding_index, rank, "replica"));
  context.standard_groups[ACCEL_GROUP_TENSOR] =
      standard(nullptr, world.split(pipeline_index * data_size + data_index, rank, "tensor"));
  // Ordered by stage: group rank = pipeline index.
  context.standard_groups[ACCEL_GROUP_PIPELINE] =
      standard(nullptr, world.split(data_index * tensor_size + tensor_index, rank, "pipeline"));
  // Context peers: the same everything but the innermost part of the data
  // index (context_index = data_index % context_size), in that order.
  const int context_slot = (pipeline_index * data_size + data_index / context_size) * tensor_size + tensor_index;
  context.standard_groups[ACCEL_GROUP_CONTEXT] =
      standard(nullptr, world.split(context_slot, rank, "context"));
  // Expert peers likewise (expert_index = data_index % expert_size); the
  // ranks holding the same experts share everything but data_index / expert_size.
  const int expert_slot = (pipeline_index * data_size + data_index / expert_size) * tensor_size + tensor_index;
  context.standard_groups[ACCEL_GROUP_EXPERT] = standard(nullptr, world.split(expert_slot, rank, "expert"));
  const int expert_data_slot = (pipeline_index * expert_size + data_index % expert_size) * tensor_size + tensor_index;
  context.standard_groups[ACCEL_GROUP_EXPERT_DATA] =
      expert_size == 1 ? context.standard_groups[ACCEL_GROUP_DATA]
                       : standard(nullptr, world.split(expert_data_slot, rank, "expert data"));
  context.standard_groups[ACCEL_GROUP_NODE] =
      standard(nullptr, world.split(context.identity.node_rank, rank, "node"));
}

void check_collective_sequences(HostContext& context, int64_t step) {
  if (!context.comm_handles) return;
  // Slot order is creation order, the same on every member of a group; the
  // exchanges are non-blocking sends plus one receive each, so groups that
  // overlap cannot deadlock whatever the order.
  for (const auto& entry : context.comm_handles->groups.objects()) {
    if (!entry->sequence) continue;
    try {
      entry->sequence->end_step(step);
    } catch (const comm::PeerFailed& e) {
      pass_on_rank_failure(context, e);
      throw;
    }
  }
}

}  // namespace accel::runtime
