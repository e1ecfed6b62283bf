// The expert groups as the sharding machinery reads them (see expert_slices.h).
#include "expert_slices.h"

#include <algorithm>

namespace accel::sharding {

ExpertGroups read_expert_groups(const sdk::Kernels& ops) {
  ExpertGroups g;
  if (!sdk::host_abi_at_least(1, 12)) return g;
  g.expert = ops.group(ACCEL_GROUP_EXPERT);
  g.expert_data = ops.group(ACCEL_GROUP_EXPERT_DATA);
  const sdk::GroupShape expert = ops.shape(g.expert), data = ops.shape(g.expert_data);
  g.rank = expert.rank;
  g.size = expert.size;
  g.data_rank = data.rank;
  g.data_size = data.size;
  return g;
}

std::vector<SliceRun> slice_runs(const UnitLayout& unit) {
  std::vector<SliceRun> runs;
  const std::vector<ParamLayout>& params = unit.params;
  for (size_t first = 0; first < params.size();) {
    const bool experts = is_expert_slice(params[first]);
    size_t end = first + 1;
    while (end < params.size() && is_expert_slice(params[end]) == experts) ++end;
    const ParamLayout& last = params[end - 1];
    runs.push_back(SliceRun{sdk::FlatRange{params[first].flat_offset, last.flat_offset + last.numel}, experts});
    first = end;
  }
  return runs;
}

bool holds_expert_slices(const UnitLayout& unit) {
  return std::any_of(unit.params.begin(), unit.params.end(), is_expert_slice);
}

bool holds_experts(const UnitLayout& unit) {
  return std::any_of(unit.params.begin(), unit.params.end(),
                     [](const ParamLayout& p) { return p.role == ACCEL_PARAM_EXPERTS; });
}

}  // namespace accel::sharding
