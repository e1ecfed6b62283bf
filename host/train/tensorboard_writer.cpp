// TensorBoard event files (see tensorboard_writer.h). Field numbers are
// tensorflow/core/util/event.proto's and summary.proto's:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
//             Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
#include "host/train/tensorboard_writer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>

namespace accel::train {
namespace {

namespace fs = std::filesystem;

// Protobuf wire types.
constexpr int kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

void put_key(std::string& out, int field, int wire_type) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire_type));
}

template <typename T>
void put_fixed(std::string& out, int field, int wire_type, T value) {
  put_key(out, field, wire_type);
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // little-endian host, as the wire
  out.append(bytes, sizeof(T));
}

void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string file_version_event(double wall_time) {
  std::string event;
  put_fixed(event, 1, kFixed64, wall_time);
  put_bytes(event, 3, "brain.Event:2");
  return event;
}

std::string event_file_name() {
  char host[256] = "localhost";
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "localhost");
  host[sizeof host - 1] = '\0';
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  return "events.out.tfevents." + std::to_string(seconds) + "." + host + "." + std::to_string(::getpid()) + ".0";
}

}  // namespace

std::string scalar_event(double wall_time, int64_t step,
                         const std::vector<std::pair<std::string, float>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string entry;
    put_bytes(entry, 1, tag);
    put_fixed(entry, 2, kFixed32, value);
    put_bytes(summary, 1, entry);
  }
  std::string event;
  put_fixed(event, 1, kFixed64, wall_time);
  put_key(event, 2, kVarint);
  put_varint(event, static_cast<uint64_t>(step));
  put_bytes(event, 5, summary);
  return event;
}

std::vector<std::pair<std::string, float>> step_scalars(const StepMetrics& m) {
  std::vector<std::pair<std::string, float>> scalars = {
      {"train/loss", static_cast<float>(m.loss)},
      {"train/lr", static_cast<float>(m.lr)},
      {"train/grad_norm", static_cast<float>(m.grad_norm)},
      {"train/tokens_per_s", static_cast<float>(m.tokens_per_s)},
      {"memory/peak_rss_bytes", static_cast<float>(m.peak_mem_bytes)},
      {"comm/bytes", static_cast<float>(m.comm_bytes)},
  };
  if (m.device_peak_allocated_bytes) {
    scalars.emplace_back("memory/device_peak_allocated_bytes", static_cast<float>(*m.device_peak_allocated_bytes));
  }
  if (m.device_peak_reserved_bytes) {
    scalars.emplace_back("memory/device_peak_reserved_bytes", static_cast<float>(*m.device_peak_reserved_bytes));
  }
  if (m.ckpt_blocking_ms) scalars.emplace_back("checkpoint/blocking_ms", static_cast<float>(*m.ckpt_blocking_ms));
  if (m.ckpt_write_ms) scalars.emplace_back("checkpoint/write_ms", static_cast<float>(*m.ckpt_write_ms));
  if (m.ckpt_staging_wait_ms) {
    scalars.emplace_back("checkpoint/staging_wait_ms", static_cast<float>(*m.ckpt_staging_wait_ms));
  }
  if (m.eval_loss) {
    scalars.emplace_back("eval/loss", static_cast<float>(*m.eval_loss));
    scalars.emplace_back("eval/ppl", static_cast<float>(std::exp(*m.eval_loss)));
  }
  // As in the metrics line: the scale exists only while fp16's scaler runs.
  if (m.loss_scale != 1.0) scalars.emplace_back("train/loss_scale", static_cast<float>(m.loss_scale));
  if (const auto total = m.memory_ledger.find("total"); total != m.memory_ledger.end()) {
    scalars.emplace_back("memory/ledger_total", static_cast<float>(total->second));
  }
  for (const auto& [name, value] : m.plugin_metrics) scalars.emplace_back("plugins/" + name, static_cast<float>(value));
  return scalars;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  if (dir.empty()) return;
  std::error_code error;
  fs::create_directories(dir, error);
  if (!fs::is_directory(dir)) {
    throw std::runtime_error("--tensorboard-dir: '" + dir + "' is not a directory" +
                             (error ? " (" + error.message() + ")" : std::string()));
  }
  try {
    file_ = std::make_unique<tfrecord::TfRecordWriter>((fs::path(dir) / event_file_name()).string());
    file_->append(file_version_event(now_seconds()));
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string("--tensorboard-dir: ") + e.what());
  }
}

void TensorBoardWriter::write(const StepMetrics& m) {
  if (!file_) return;
  try {
    file_->append(scalar_event(now_seconds(), m.step, step_scalars(m)));
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string("--tensorboard-dir: ") + e.what());
  }
}

}  // namespace accel::train
