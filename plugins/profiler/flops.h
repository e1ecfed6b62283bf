// FLOPs of the operators whose cost is known from their input shapes, as
// torch.profiler's with_flops counts them: matrix products (aten::linear,
// aten::addmm, aten::mm, aten::bmm, aten::baddbmm, aten::matmul: 2·m·k·n per
// product) and scaled dot-product attention (2·L·S·E for QKᵀ plus 2·L·S·Ev
// for the weighted sum, per batch and head; its backward twice that).
//
// count_flops marks, per slice, the FLOPs of its own product and whether
// they count towards the step: only a product with no counted ancestor does
// (aten::linear runs aten::addmm inside; counting both would double it).
// Pure functions; no threads.
#pragma once

#include <string>
#include <vector>

#include "timeline.h"

namespace accel::profiler {

// The input shapes of an operator's detail ("shapes=[4, 8], [8, 2]; ...").
std::vector<std::vector<int64_t>> parse_shapes(const std::string& detail);

// FLOPs of one operator call, 0 when unknown.
double operator_flops(const std::string& name, const std::vector<std::vector<int64_t>>& shapes);

void count_flops(Timeline& timeline);

}  // namespace accel::profiler
