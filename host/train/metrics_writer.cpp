// JSON-lines metrics (see metrics_writer.h).
#include "host/train/metrics_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace accel::train {
namespace {

// Why `mode` cannot take metrics lines, or nullptr when it can.
const char* unusable_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISBLK(mode)) return "a block device";
  return nullptr;
}

std::runtime_error open_error(const std::string& path, const std::string& why) {
  return std::runtime_error("--metrics-file: cannot open '" + path + "': " + why);
}

}  // namespace

MetricsWriter::MetricsWriter(const std::string& path) : path_(path) {
  if (path.empty()) return;
  // The type is checked before opening: opening a FIFO for writing blocks
  // until a reader appears. O_NONBLOCK covers a FIFO swapped in between
  // (it then fails with ENXIO), and the descriptor is checked again.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (const char* kind = unusable_kind(st.st_mode)) throw open_error(path, std::string("it is ") + kind);
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0) throw open_error(path, std::strerror(errno));
  if (::fstat(fd, &st) != 0 || unusable_kind(st.st_mode) != nullptr) {
    ::close(fd);
    throw open_error(path, "it is not a regular file or character device");
  }
  // Blocking writes from here: a slow terminal must not lose lines to EAGAIN.
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    const int error = errno;
    ::close(fd);
    throw open_error(path, std::strerror(error));
  }
  file_ = ::fdopen(fd, "a");
  if (!file_) {
    const int error = errno;
    ::close(fd);
    throw open_error(path, std::strerror(error));
  }
}

MetricsWriter::~MetricsWriter() {
  // Every line was flushed (and checked) when written; nothing is left.
  if (file_) std::fclose(file_);
}

void MetricsWriter::note_resume_skipped(std::vector<std::string> lines) { resume_skipped_ = std::move(lines); }

void MetricsWriter::write(const StepMetrics& m) {
  if (!file_) return;
  nlohmann::json line = {{"step", m.step},
                         {"loss", m.loss},
                         {"lr", m.lr},
                         {"grad_norm", m.grad_norm},
                         {"tokens_per_s", m.tokens_per_s},
                         {"peak_mem_bytes", m.peak_mem_bytes}};
  line["comm_bytes"] = m.comm_bytes;
  if (m.device_peak_allocated_bytes) line["device_peak_allocated_bytes"] = *m.device_peak_allocated_bytes;
  if (m.device_peak_reserved_bytes) line["device_peak_reserved_bytes"] = *m.device_peak_reserved_bytes;
  if (m.ckpt_blocking_ms) line["ckpt_blocking_ms"] = *m.ckpt_blocking_ms;
  if (m.ckpt_host_bytes) line["ckpt_host_bytes"] = *m.ckpt_host_bytes;
  if (m.ckpt_staging_wait_ms) line["ckpt_staging_wait_ms"] = *m.ckpt_staging_wait_ms;
  if (m.ckpt_write_ms) line["ckpt_write_ms"] = *m.ckpt_write_ms;
  if (m.ckpt_committed_step) line["ckpt_committed_step"] = *m.ckpt_committed_step;
  if (m.eval_loss) {
    line["eval_loss"] = *m.eval_loss;
    line["eval_ppl"] = std::exp(*m.eval_loss);
  }
  if (!m.memory_peak_bytes.empty()) line["memory_peak_bytes"] = m.memory_peak_bytes;
  if (!m.memory_startup_peak_bytes.empty()) line["memory_startup_peak_bytes"] = m.memory_startup_peak_bytes;
  if (!m.memory_ledger.empty()) line["memory_ledger"] = m.memory_ledger;
  if (!m.memory_ledger_peak.empty()) line["memory_ledger_peak"] = m.memory_ledger_peak;
  if (!m.param_bytes_alive_after_forward.empty()) {
    line["param_bytes_alive_after_forward"] = m.param_bytes_alive_after_forward;
  }
  if (!m.moe_tokens_per_expert.empty()) {
    line["moe_tokens_per_expert"] = m.moe_tokens_per_expert;
    line["moe_dropped_tokens"] = m.moe_dropped;
  }
  if (m.moe_aux_loss) line["moe_aux_loss"] = *m.moe_aux_loss;
  if (m.loss_scale != 1.0) line["loss_scale"] = m.loss_scale;
  if (m.skipped) line["skipped"] = true;
  if (!resume_skipped_.empty()) line["resume_skipped"] = std::exchange(resume_skipped_, {});
  for (const auto& [name, value] : m.plugin_metrics) line[name] = value;
  const std::string text = line.dump() + "\n";
  // fwrite may only buffer; the fflush is where a full disk shows.
  errno = 0;
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size() || std::fflush(file_) != 0) {
    const int error = errno;
    std::clearerr(file_);
    throw std::runtime_error("--metrics-file: cannot write '" + path_ + "': " +
                             (error != 0 ? std::strerror(error) : "write failed"));
  }
}

}  // namespace accel::train
