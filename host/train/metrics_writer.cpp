// JSON-lines metrics (see metrics_writer.h).
#include "host/train/metrics_writer.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace accel::train {

MetricsWriter::MetricsWriter(const std::string& path) {
  if (path.empty()) return;
  file_ = std::fopen(path.c_str(), "a");
  if (!file_) {
    throw std::runtime_error("--metrics-file: cannot open '" + path + "': " + std::strerror(errno));
  }
}

MetricsWriter::~MetricsWriter() {
  if (file_) std::fclose(file_);
}

void MetricsWriter::write(const StepMetrics& m) {
  if (!file_) return;
  nlohmann::json line = {{"step", m.step},
                         {"loss", m.loss},
                         {"lr", m.lr},
                         {"grad_norm", m.grad_norm},
                         {"tokens_per_s", m.tokens_per_s},
                         {"peak_mem_bytes", m.peak_mem_bytes}};
  line["comm_bytes"] = m.comm_bytes;
  if (!m.memory_peak_bytes.empty()) line["memory_peak_bytes"] = m.memory_peak_bytes;
  if (!m.memory_startup_peak_bytes.empty()) line["memory_startup_peak_bytes"] = m.memory_startup_peak_bytes;
  if (!m.memory_ledger.empty()) line["memory_ledger"] = m.memory_ledger;
  if (!m.memory_ledger_peak.empty()) line["memory_ledger_peak"] = m.memory_ledger_peak;
  if (!m.param_bytes_alive_after_forward.empty()) {
    line["param_bytes_alive_after_forward"] = m.param_bytes_alive_after_forward;
  }
  if (m.loss_scale != 1.0) line["loss_scale"] = m.loss_scale;
  if (m.skipped) line["skipped"] = true;
  for (const auto& [name, value] : m.plugin_metrics) line[name] = value;
  const std::string text = line.dump() + "\n";
  std::fwrite(text.data(), 1, text.size(), file_);
  std::fflush(file_);
}

}  // namespace accel::train
