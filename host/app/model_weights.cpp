// Reading a checkpoint's whole model and publishing files (see model_weights.h).
#include "host/app/model_weights.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "host/checkpoint/atomic_dir.h"
#include "host/checkpoint/safetensors.h"
#include "host/runtime/checkpoint_reader.h"
#include "host/runtime/plugin_state.h"
#include "host/runtime/service_support.h"
#include "host/runtime/tensor_views.h"

namespace accel::app {

namespace fs = std::filesystem;
using checkpoint::CheckpointError;

fs::path resolve_checkpoint(const fs::path& dir, const std::string& command) {
  if (!fs::is_directory(dir)) throw CheckpointError(command + ": '" + dir.string() + "' is not a directory");
  if (fs::exists(dir / checkpoint::kManifestFileName)) {
    std::string why;
    if (!checkpoint::verify_manifest(dir, &why)) {
      throw CheckpointError(command + ": '" + dir.string() + "' is damaged: " + why);
    }
    return dir;
  }
  std::vector<std::string> skipped;
  if (auto newest = checkpoint::find_newest_complete(dir, "step_", &skipped)) return *newest;
  std::string detail;
  for (const std::string& line : skipped) detail += (detail.empty() ? " (" : "; ") + line;
  throw CheckpointError(command + ": '" + dir.string() + "' is neither a checkpoint nor holds a complete one" +
                        (detail.empty() ? std::string() : detail + ")"));
}

NamedTensors read_whole_model(const fs::path& checkpoint, const std::string& command) {
  const runtime::CheckpointReader reader = runtime::CheckpointReader::open_directory(checkpoint);
  const std::vector<const runtime::StoredTensor*> stored = reader.tensors_in(ACCEL_CHECKPOINT_MODEL);
  if (stored.empty()) throw CheckpointError(command + ": '" + checkpoint.string() + "' holds no model weights");
  NamedTensors tensors;
  for (const runtime::StoredTensor* t : stored) {
    try {
      tensors.emplace_back(t->name, reader.read_whole(*t));
    } catch (const runtime::ServiceError& e) {
      throw CheckpointError(command + ": '" + checkpoint.string() + "': " + e.what());
    }
  }
  return tensors;
}

fs::path temporary_beside(const fs::path& final) {
  return final.parent_path() / ("." + final.filename().string() + ".tmp." + std::to_string(::getpid()));
}

void publish(const fs::path& temporary, const fs::path& final, const std::string& command) {
  std::error_code error;
  fs::rename(temporary, final, error);
  if (error) {
    fs::remove(temporary, error);
    throw CheckpointError(command + ": cannot rename into '" + final.string() + "': " + error.message());
  }
  checkpoint::fsync_path(final.parent_path());
}

void write_safetensors_file(const fs::path& final, const NamedTensors& tensors, const std::string& command) {
  checkpoint::SafetensorsWriter writer;
  writer.set_metadata("format", "pt");  // what transformers expects of a model.safetensors
  for (const auto& [name, tensor] : tensors) {
    const auto dtype = runtime::to_file_dtype(runtime::to_dl_dtype(tensor.scalar_type()));
    writer.add(name, *dtype, std::vector<int64_t>(tensor.sizes().begin(), tensor.sizes().end()), tensor.data_ptr(),
               tensor.nbytes());
  }
  const fs::path temporary = temporary_beside(final);
  writer.write(temporary);  // fsynced; removed on failure
  publish(temporary, final, command);
}

void write_text_file(const fs::path& final, const std::string& text, const std::string& command) {
  const fs::path temporary = temporary_beside(final);
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw CheckpointError(command + ": cannot create '" + temporary.string() + "': " + std::strerror(errno));
  std::string error;
  size_t done = 0;
  while (done < text.size() && error.empty()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) error = std::strerror(errno);
    else done += static_cast<size_t>(n);
  }
  if (error.empty() && ::fsync(fd) != 0) error = std::strerror(errno);
  if (::close(fd) != 0 && error.empty()) error = std::strerror(errno);
  if (!error.empty()) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw CheckpointError(command + ": cannot write '" + temporary.string() + "': " + error);
  }
  publish(temporary, final, command);
}

void create_output_directory(const fs::path& dir, const std::string& command) {
  std::error_code error;
  fs::create_directories(dir, error);
  if (error || !fs::is_directory(dir)) {
    throw CheckpointError(command + ": cannot create the output directory '" + dir.string() + "'" +
                          (error ? ": " + error.message() : std::string()));
  }
}

}  // namespace accel::app
