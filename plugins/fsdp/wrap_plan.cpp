// wrap_plan.cpp — selecting ignored units and forming wrap groups (see
// wrap_plan.h).
#include "wrap_plan.h"

#include <accel/sdk/error.hpp>

#include <algorithm>
#include <map>
#include <numeric>

namespace accel::fsdp {

using sdk::Error;

namespace {

const char* kind_name(AccelUnitKind kind) {
  switch (kind) {
    case ACCEL_UNIT_EMBEDDING: return "embedding";
    case ACCEL_UNIT_BLOCK: return "block";
    case ACCEL_UNIT_HEAD: return "head";
    default: return "other";
  }
}

// A unit kind ("block"), a unit's whole name ("block.1"), or a prefix that
// ends at a '.' of it ("block" for "block.1"): "block.1" is not "block.10".
bool matches(const UnitLayout& unit, const std::string& name) {
  if (name == kind_name(unit.kind) || unit.name == name) return true;
  return unit.name.size() > name.size() && unit.name.compare(0, name.size(), name) == 0 &&
         unit.name[name.size()] == '.';
}

// Union-find over group indices.
int32_t find_root(std::vector<int32_t>& parent, int32_t g) {
  while (parent[static_cast<size_t>(g)] != g) {
    parent[static_cast<size_t>(g)] = parent[static_cast<size_t>(parent[static_cast<size_t>(g)])];
    g = parent[static_cast<size_t>(g)];
  }
  return g;
}

}  // namespace

std::vector<bool> select_ignored(const std::vector<UnitLayout>& units, const std::optional<std::regex>& ignored,
                                 std::vector<std::string>* widened) {
  std::vector<bool> out(units.size(), false);
  if (!ignored) return out;
  for (const UnitLayout& u : units) out[static_cast<size_t>(u.index)] = std::regex_match(u.name, *ignored);
  for (bool changed = true; changed;) {
    changed = false;
    for (const UnitLayout& u : units) {
      for (int32_t t : u.tied_units) {
        const auto a = static_cast<size_t>(u.index), b = static_cast<size_t>(t);
        if (out[a] != out[b]) {
          if (widened) widened->push_back(out[a] ? units[b].name : u.name);
          out[a] = out[b] = true;
          changed = true;
        }
      }
    }
  }
  return out;
}

WrapPlan plan_wrap_groups(const std::vector<UnitLayout>& units, const std::vector<bool>& sharded, WrapPolicy policy,
                          const std::vector<std::string>& names, int64_t min_num_params) {
  const size_t n = units.size();
  std::vector<int32_t> group_of(n, -1);
  int32_t num_groups = 0;

  if (policy == WrapPolicy::transformer_based) {
    const std::vector<std::string> wrapped = names.empty() ? std::vector<std::string>{"block"} : names;
    for (const std::string& name : wrapped) {
      if (std::none_of(units.begin(), units.end(), [&](const UnitLayout& u) { return matches(u, name); })) {
        std::string list;
        for (const UnitLayout& u : units) list += (list.empty() ? "" : ", ") + u.name;
        throw Error(ACCEL_ERROR_INVALID_ARGUMENT, "transformer_cls_names_to_wrap: '" + name +
                                                      "' matches no unit kind (embedding, block, head) or unit name (" +
                                                      list + ")");
      }
    }
    int32_t root = -1;
    for (size_t u = 0; u < n; ++u) {
      if (!sharded[u]) continue;
      const bool own = std::any_of(wrapped.begin(), wrapped.end(),
                                   [&](const std::string& name) { return matches(units[u], name); });
      if (own) {
        group_of[u] = num_groups++;
      } else {
        if (root < 0) root = num_groups++;
        group_of[u] = root;
      }
    }
  } else if (policy == WrapPolicy::size_based) {
    int64_t filled = 0;
    int32_t open = -1;
    for (size_t u = 0; u < n; ++u) {
      if (!sharded[u]) continue;
      if (open < 0) {
        open = num_groups++;
        filled = 0;
      }
      group_of[u] = open;
      filled += units[u].numel;
      if (filled >= min_num_params) open = -1;
    }
  } else {
    for (size_t u = 0; u < n; ++u) {
      if (!sharded[u]) continue;
      group_of[u] = 0;
      num_groups = 1;
    }
  }

  // Tied units share a group.
  std::vector<int32_t> parent(static_cast<size_t>(num_groups));
  std::iota(parent.begin(), parent.end(), 0);
  for (const UnitLayout& u : units) {
    for (int32_t t : u.tied_units) {
      const int32_t a = group_of[static_cast<size_t>(u.index)], b = group_of[static_cast<size_t>(t)];
      if (a >= 0 && b >= 0) parent[static_cast<size_t>(find_root(parent, a))] = find_root(parent, b);
    }
  }

  // Renumber by first unit.
  WrapPlan plan;
  plan.group_of.assign(n, -1);
  std::map<int32_t, int32_t> renumbered;  // root -> new index
  for (size_t u = 0; u < n; ++u) {
    if (group_of[u] < 0) continue;
    const int32_t root = find_root(parent, group_of[u]);
    auto [it, inserted] = renumbered.emplace(root, static_cast<int32_t>(plan.groups.size()));
    if (inserted) plan.groups.emplace_back();
    plan.groups[static_cast<size_t>(it->second)].units.push_back(static_cast<int32_t>(u));
    plan.group_of[u] = it->second;
  }
  return plan;
}

}  // namespace accel::fsdp
