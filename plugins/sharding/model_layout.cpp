// model_layout.cpp — copying the model's units and parameters out of the
// host's model services (see model_layout.h).
#include "model_layout.h"

#include <accel/sdk/error.hpp>

#include <algorithm>

namespace accel::sharding {

using sdk::Error;
using sdk::format;

std::vector<UnitLayout> read_model_layout(const sdk::Services& s, SplitParams splits) {
  const AccelModelServices& model = *s.table()->model;
  const AccelModelInfo* info = nullptr;
  s.check(model.get_info(s.host(), &info), "model get_info");
  std::vector<UnitLayout> units;
  for (int32_t u = 0; u < info->num_units; ++u) {
    const AccelUnitInfo* unit = nullptr;
    s.check(model.get_unit(s.host(), u, &unit), "model get_unit");
    UnitLayout layout;
    layout.index = u;
    layout.name = unit->name;
    layout.kind = unit->kind;
    layout.numel = unit->numel;
    layout.num_params = unit->num_params;
    layout.tied_copy = (unit->flags & ACCEL_UNIT_FLAG_TIED_COPY) != 0;
    layout.held = (unit->flags & ACCEL_UNIT_FLAG_LOCAL) != 0 || layout.tied_copy;
    for (int32_t i = 0; i < unit->num_params; ++i) {
      const AccelParamInfo* p = nullptr;
      s.check(model.get_param(s.host(), u, i, &p), "model get_param");
      if (p->tied_unit >= 0 && p->tied_unit != u) {
        if (std::find(layout.tied_units.begin(), layout.tied_units.end(), p->tied_unit) == layout.tied_units.end()) {
          layout.tied_units.push_back(p->tied_unit);
        }
      }
      if (p->flat_offset < 0) continue;  // a tied reference: the owner's storage
      ParamLayout param;
      param.name = p->name;
      param.index = i;
      param.role = p->role;
      param.flat_offset = p->flat_offset;
      param.numel = p->numel;
      param.global_shape.assign(p->global_shape, p->global_shape + p->ndim);
      param.local_shape.assign(p->local_shape, p->local_shape + p->ndim);
      if (param.local_shape != param.global_shape || p->split_dim >= 0) {
        if (splits == SplitParams::refuse) {
          throw Error(
              ACCEL_ERROR_FAILED_PRECONDITION,
              format("parameter %s is split by another plugin's plan; the sharding plugins shard whole parameters only",
                     p->name));
        }
        if (!ACCEL_STRUCT_HAS_FIELD(p, AccelParamInfo, split_blocks)) {
          throw Error(ACCEL_ERROR_UNSUPPORTED,
                      format("parameter %s is split, and this host (ABI < 1.5) does not say how", p->name));
        }
        param.split.dim = p->split_dim;
        param.split.blocks = p->split_blocks;
        param.split.local_offset = p->local_offset[p->split_dim];
        param.split.local_shape = param.local_shape;
        param.split.global_shape = param.global_shape;
      }
      layout.params.push_back(std::move(param));
    }
    std::sort(layout.params.begin(), layout.params.end(),
              [](const ParamLayout& a, const ParamLayout& b) { return a.flat_offset < b.flat_offset; });
    int64_t next = 0;
    for (const ParamLayout& p : layout.params) {
      if (p.flat_offset != next) {
        throw Error(ACCEL_ERROR_INTERNAL,
                    format("unit %s: parameter %s starts at %lld, expected %lld", layout.name.c_str(), p.name.c_str(),
                           static_cast<long long>(p.flat_offset), static_cast<long long>(next)));
      }
      next += p.numel;
    }
    if (next != layout.numel) {
      throw Error(ACCEL_ERROR_INTERNAL, format("unit %s: parameters cover %lld of %lld elements", layout.name.c_str(),
                                               static_cast<long long>(next), static_cast<long long>(layout.numel)));
    }
    units.push_back(std::move(layout));
  }
  return units;
}

std::vector<UnitLayout> held_units(const std::vector<UnitLayout>& units) {
  std::vector<UnitLayout> held;
  for (const UnitLayout& u : units) {
    if (u.held) held.push_back(u);
  }
  return held;
}

}  // namespace accel::sharding
