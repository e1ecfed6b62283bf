// Operator FLOPs from input shapes (see flops.h).
#include "flops.h"

#include <cstdlib>

namespace accel::profiler {
namespace {

double product(const std::vector<int64_t>& dims, size_t from, size_t to) {
  double p = 1.0;
  for (size_t i = from; i < to && i < dims.size(); ++i) p *= static_cast<double>(dims[i]);
  return p;
}

// a [..., m, k] x b [..., k, n]: 2·batch·m·k·n (batch from a's leading dims).
double matmul_flops(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  if (a.size() < 2 || b.size() < 2) return 0.0;
  const double m = static_cast<double>(a[a.size() - 2]), k = static_cast<double>(a.back());
  const double n = static_cast<double>(b.back());
  return 2.0 * product(a, 0, a.size() - 2) * m * k * n;
}

}  // namespace

std::vector<std::vector<int64_t>> parse_shapes(const std::string& detail) {
  std::vector<std::vector<int64_t>> shapes;
  const std::string text = detail_value(detail, "shapes");
  std::vector<int64_t>* current = nullptr;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '[') {
      shapes.emplace_back();
      current = &shapes.back();
    } else if (c == ']') {
      current = nullptr;
    } else if (current && (c == '-' || (c >= '0' && c <= '9'))) {
      char* end = nullptr;
      current->push_back(std::strtoll(text.c_str() + i, &end, 10));
      i = static_cast<size_t>(end - text.c_str()) - 1;
    }
  }
  return shapes;
}

double operator_flops(const std::string& name, const std::vector<std::vector<int64_t>>& s) {
  if (name == "aten::linear" && s.size() >= 2 && !s[0].empty() && s[1].size() == 2) {
    // input [..., in] x weight [out, in]
    return 2.0 * product(s[0], 0, s[0].size()) * static_cast<double>(s[1][0]);
  }
  if (name == "aten::addmm" && s.size() >= 3) return matmul_flops(s[1], s[2]);
  if ((name == "aten::mm" || name == "aten::bmm" || name == "aten::matmul") && s.size() >= 2) {
    return matmul_flops(s[0], s[1]);
  }
  if (name == "aten::baddbmm" && s.size() >= 3) return matmul_flops(s[1], s[2]);
  if (name.find("scaled_dot_product") != std::string::npos && s.size() >= 3 && s[0].size() == 4 &&
      s[1].size() == 4 && s[2].size() == 4) {
    // q [B, H, L, E], k [B, H, S, E], v [B, H, S, Ev]
    const double bh = static_cast<double>(s[0][0]) * static_cast<double>(s[0][1]);
    const double l = static_cast<double>(s[0][2]), e = static_cast<double>(s[0][3]);
    const double src = static_cast<double>(s[1][2]), ev = static_cast<double>(s[2][3]);
    const double forward = 2.0 * bh * l * src * e + 2.0 * bh * l * src * ev;
    return name.find("backward") != std::string::npos ? 2.0 * forward : forward;
  }
  return 0.0;
}

void count_flops(Timeline& t) {
  // Parents precede children in t.slices, so an ancestor's `counted` is
  // known when a descendant is reached.
  std::vector<bool> under_counted(t.slices.size(), false);
  for (size_t i = 0; i < t.slices.size(); ++i) {
    Slice& s = t.slices[i];
    const bool inherited = s.parent >= 0 && under_counted[static_cast<size_t>(s.parent)];
    const Event& e = t.begin_of(s);
    if (e.category == "operator") s.flops = operator_flops(e.name, parse_shapes(e.detail));
    s.counted = s.flops > 0.0 && !inherited;
    under_counted[i] = inherited || s.counted;
  }
}

}  // namespace accel::profiler
