// zero_plan.cpp — the partition plan of each ZeRO stage (see zero_plan.h).
#include "zero_plan.h"

#include <algorithm>
#include <numeric>

#include "sharding/expert_slices.h"
#include "zero_config.h"  // Error, shown_text

namespace accel::zero {

using sharding::GatherGroup;
using sharding::GatherPlan;
using sharding::UnitLayout;

namespace {

int32_t find_root(std::vector<int32_t>& parent, int32_t u) {
  while (parent[static_cast<size_t>(u)] != u)
    u = parent[static_cast<size_t>(u)] = parent[static_cast<size_t>(parent[static_cast<size_t>(u)])];
  return u;
}

}  // namespace

GatherPlan plan_partitions(const std::vector<UnitLayout>& units, int stage, int64_t persistence_threshold,
                           int64_t max_reuse_distance) {
  GatherPlan plan;
  plan.group_of.assign(units.size(), -1);
  if (stage == 0) return plan;

  // Tied units in one set (union-find), each set a group in forward order.
  std::vector<int32_t> parent(units.size());
  std::iota(parent.begin(), parent.end(), 0);
  for (const UnitLayout& u : units) {
    for (int32_t t : u.tied_units) {
      const int32_t a = find_root(parent, u.index), b = find_root(parent, t);
      parent[static_cast<size_t>(std::max(a, b))] = std::min(a, b);
    }
  }
  std::vector<int32_t> group_of_root(units.size(), -1);
  for (const UnitLayout& u : units) {
    const int32_t root = find_root(parent, u.index);
    int32_t& g = group_of_root[static_cast<size_t>(root)];
    if (g < 0) {
      g = static_cast<int32_t>(plan.groups.size());
      plan.groups.push_back(GatherGroup{});
    }
    plan.groups[static_cast<size_t>(g)].units.push_back(u.index);
  }

  // Stage 3's persistent groups drop out of the plan (host-owned).
  std::vector<GatherGroup> kept;
  for (GatherGroup& g : plan.groups) {
    int64_t numel = 0;
    for (int32_t u : g.units) numel += units[static_cast<size_t>(u)].numel;
    if (stage == 3 && numel < persistence_threshold) continue;
    kept.push_back(std::move(g));
  }
  plan.groups = std::move(kept);
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    for (int32_t u : plan.groups[g].units) plan.group_of[static_cast<size_t>(u)] = static_cast<int32_t>(g);
  }
  if (stage == 3) {
    for (GatherGroup& g : plan.groups) {
      int64_t distance = 0;  // sharded elements after the group's last forward unit
      for (size_t u = static_cast<size_t>(g.last_forward()) + 1; u < units.size(); ++u) {
        if (plan.group_of[u] >= 0) distance += units[u].numel;
      }
      g.keep_until_backward = distance < max_reuse_distance;
    }
  }
  return plan;
}

int64_t hidden_size(const std::vector<UnitLayout>& units) {
  for (const UnitLayout& u : units) {
    if (u.kind != ACCEL_UNIT_EMBEDDING) continue;
    for (const sharding::ParamLayout& p : u.params) {
      if (p.global_shape.size() == 2) return p.global_shape[1];
    }
  }
  return 0;
}

const char* moe_block_class(const UnitLayout& unit) {
  if (unit.kind != ACCEL_UNIT_BLOCK || !sharding::holds_experts(unit)) return nullptr;
  // transformers' Qwen2MoeSparseMoeBlock is the one with a shared expert
  // (it always has one); MixtralSparseMoeBlock has none.
  const bool shared = std::any_of(unit.params.begin(), unit.params.end(), [](const sharding::ParamLayout& p) {
    return p.name.find(".mlp.shared_expert.") != std::string::npos;
  });
  return shared ? "Qwen2MoeSparseMoeBlock" : "MixtralSparseMoeBlock";
}

std::vector<int32_t> moe_leaf_units(const std::vector<UnitLayout>& units, const std::vector<std::string>& class_names) {
  std::vector<std::string> present;  // the model's block classes, each once
  for (const UnitLayout& u : units) {
    const char* cls = moe_block_class(u);
    if (cls != nullptr && std::find(present.begin(), present.end(), cls) == present.end()) present.emplace_back(cls);
  }
  for (const std::string& name : class_names) {
    if (present.empty()) {
      throw sdk::Error(ACCEL_ERROR_INVALID_ARGUMENT, "--deepspeed_zero.transformer_moe_cls_names " + shown_text(name) +
                                                    ": the model has no mixture-of-experts blocks (a moe-tiny or "
                                                    "moe-small model, or --n-experts, has)");
    }
    if (std::find(present.begin(), present.end(), name) == present.end()) {
      std::string listed;
      for (const std::string& cls : present) listed += (listed.empty() ? "" : ", ") + cls;
      throw sdk::Error(ACCEL_ERROR_INVALID_ARGUMENT, "--deepspeed_zero.transformer_moe_cls_names " + shown_text(name) +
                                                    ": the model has no such class; its mixture-of-experts blocks "
                                                    "are " + listed);
    }
  }
  std::vector<int32_t> moe;
  for (const UnitLayout& u : units) {
    const char* cls = moe_block_class(u);
    if (cls != nullptr && std::find(class_names.begin(), class_names.end(), cls) != class_names.end()) {
      moe.push_back(u.index);
    }
  }
  return moe;
}

}  // namespace accel::zero
