// The per-rank summary table (see summary.h).
#include "summary.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace accel::profiler {
namespace {

std::string format_time(double ns) {
  char buffer[32];
  if (ns >= 1e9) {
    std::snprintf(buffer, sizeof buffer, "%.3fs", ns / 1e9);
  } else if (ns >= 1e6) {
    std::snprintf(buffer, sizeof buffer, "%.3fms", ns / 1e6);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.3fus", ns / 1e3);
  }
  return buffer;
}

}  // namespace

std::vector<StepFlops> flops_per_step(const Timeline& t, double peak_tflops) {
  std::map<int64_t, StepFlops> steps;
  for (const Slice& s : t.slices) {
    const Event& e = t.begin_of(s);
    if (e.name == "step" && e.category == "host") {
      StepFlops& row = steps[e.step];
      row.step = e.step;
      row.seconds = static_cast<double>(s.dur_ns) / 1e9;
    }
  }
  for (const Slice& s : t.slices) {
    if (!s.counted) continue;
    const auto it = steps.find(t.begin_of(s).step);
    if (it != steps.end()) it->second.flops += s.flops;
  }
  std::vector<StepFlops> out;
  for (auto& [step, row] : steps) {
    if (peak_tflops > 0.0 && row.seconds > 0.0) row.mfu = row.flops / row.seconds / (peak_tflops * 1e12);
    out.push_back(row);
  }
  return out;
}

std::string summary_table(const Timeline& t, int32_t rank, size_t rows, bool with_flops,
                          const std::vector<StepFlops>& steps) {
  struct Row {
    std::string name;
    std::string category;
    int64_t calls = 0;
    double self_ns = 0.0;
    double total_ns = 0.0;
    double flops = 0.0;
  };
  std::map<std::string, Row> by_name;
  double all_self = 0.0;
  for (const Slice& s : t.slices) {
    const Event& e = t.begin_of(s);
    Row& row = by_name[e.category + "\x1f" + e.name];
    row.name = e.name;
    row.category = e.category;
    row.calls += 1;
    row.self_ns += static_cast<double>(s.self_ns);
    row.total_ns += static_cast<double>(s.dur_ns);
    row.flops += s.flops;
    all_self += static_cast<double>(s.self_ns);
  }
  std::vector<Row> sorted;
  for (auto& [key, row] : by_name) sorted.push_back(row);
  std::stable_sort(sorted.begin(), sorted.end(), [](const Row& a, const Row& b) { return a.self_ns > b.self_ns; });
  if (sorted.size() > rows) sorted.resize(rows);

  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "profile of rank %d: top %zu ranges and operators by self time\n", rank,
                sorted.size());
  out += line;
  const char* rule =
      "------------------------------------------------  ------------  -------  ------------  ------------  "
      "------------  --------";
  std::snprintf(line, sizeof line, "%-48s  %-12s  %7s  %12s  %12s  %12s  %8s%s\n", "Name", "Category", "Self %",
                "Self total", "Total", "Avg", "Calls", with_flops ? "    Total GFLOPs" : "");
  out += std::string(rule) + (with_flops ? "  ----------------" : "") + "\n" + line + rule +
         (with_flops ? "  ----------------" : "") + "\n";
  for (const Row& row : sorted) {
    std::string name = row.name.size() > 48 ? row.name.substr(0, 45) + "..." : row.name;
    char flops[32] = "";
    if (with_flops) std::snprintf(flops, sizeof flops, "  %16.3f", row.flops / 1e9);
    std::snprintf(line, sizeof line, "%-48s  %-12s  %6.2f%%  %12s  %12s  %12s  %8lld%s\n", name.c_str(),
                  row.category.substr(0, 12).c_str(), all_self > 0 ? 100.0 * row.self_ns / all_self : 0.0,
                  format_time(row.self_ns).c_str(), format_time(row.total_ns).c_str(),
                  format_time(row.total_ns / static_cast<double>(row.calls)).c_str(),
                  static_cast<long long>(row.calls), flops);
    out += line;
  }
  out += std::string(rule) + (with_flops ? "  ----------------" : "") + "\n";
  std::snprintf(line, sizeof line, "Self time total: %s\n", format_time(all_self).c_str());
  out += line;
  if (with_flops) {
    out += "\nstep  seconds     GFLOPs      TFLOP/s   MFU\n";
    for (const StepFlops& s : steps) {
      std::snprintf(line, sizeof line, "%4lld  %9.6f  %9.3f  %9.5f   %s\n", static_cast<long long>(s.step),
                    s.seconds, s.flops / 1e9, s.seconds > 0 ? s.flops / s.seconds / 1e12 : 0.0,
                    s.mfu > 0 ? (std::to_string(100.0 * s.mfu).substr(0, 7) + "%").c_str() : "-");
      out += line;
    }
  }
  return out;
}

}  // namespace accel::profiler
