// accel-host merge-weights (see merge_weights.h).
#include "host/app/merge_weights.h"

#include <ATen/core/Dict.h>
#include <caffe2/serialize/inline_container.h>
#include <fcntl.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "host/app/model_weights.h"
#include "host/checkpoint/safetensors.h"
#include "host/cli/options.h"
#include "host/util/log.h"
#include "host/util/strformat.h"

namespace accel::app {
namespace {

namespace fs = std::filesystem;
using checkpoint::CheckpointError;

constexpr const char* kSafetensorsOutput = "model.safetensors";
constexpr const char* kPickleOutput = "pytorch_model.bin";
const std::string kCommand = "merge-weights";

// True when `inner` is `outer` or lies inside it.
bool is_within(const fs::path& inner, const fs::path& outer) {
  const fs::path a = fs::weakly_canonical(inner);
  const fs::path b = fs::weakly_canonical(outer);
  auto [stop, unused] = std::mismatch(b.begin(), b.end(), a.begin(), a.end());
  return stop == b.end();
}

// torch.save's zip layout (data.pkl, data/<i>, byteorder), pickled without
// TorchScript's type tags: torch::pickle_save tags the dict with
// torch.jit._pickle.restore_type_tag, which torch.load(weights_only=True)
// refuses.
void write_pickle(const fs::path& final, const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, tensor] : tensors) dict.insert(name, tensor);
  std::vector<char> pickle;
  torch::jit::Pickler pickler([&](const char* data, size_t size) { pickle.insert(pickle.end(), data, data + size); },
                              /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
                              /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(c10::IValue(dict));
  pickler.stop();

  const fs::path temporary = temporary_beside(final);
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw CheckpointError("merge-weights: cannot create '" + temporary.string() + "': " + std::strerror(errno));
  std::string write_error;
  const auto write_all = [&](const void* data, size_t size) -> size_t {
    const char* bytes = static_cast<const char*>(data);
    size_t done = 0;
    while (done < size && write_error.empty()) {
      const ssize_t n = ::write(fd, bytes + done, size - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) write_error = std::strerror(errno);
      else done += static_cast<size_t>(n);
    }
    return done;
  };
  try {
    caffe2::serialize::PyTorchStreamWriter archive(write_all);
    const std::vector<at::Tensor>& storages = pickler.tensorData();
    for (size_t i = 0; i < storages.size(); ++i) {
      const at::Tensor& t = storages[i];
      archive.writeRecord("data/" + std::to_string(i), t.storage().data(), t.storage().nbytes());
    }
    archive.writeRecord("data.pkl", pickle.data(), pickle.size());
    archive.writeRecord("byteorder", "little", 6);
    archive.writeEndOfFile();
  } catch (const std::exception& e) {
    if (write_error.empty()) write_error = e.what();
  }
  if (write_error.empty() && ::fsync(fd) != 0) write_error = std::strerror(errno);
  if (::close(fd) != 0 && write_error.empty()) write_error = std::strerror(errno);
  if (!write_error.empty()) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw CheckpointError("merge-weights: cannot write '" + temporary.string() + "': " + write_error);
  }
  publish(temporary, final, kCommand);
}

}  // namespace

std::string merge_weights_usage() {
  return "usage: accel-host merge-weights CHECKPOINT_DIR OUTPUT_PATH [--no-safe-serialization] "
         "[--remove-checkpoint-dir]\n"
         "\n"
         "Merges the model weights of a checkpoint, however they were sharded across ranks and files,\n"
         "into one file of whole tensors named after the parameters.\n"
         "\n"
         "  CHECKPOINT_DIR           a checkpoint directory (its manifest must verify), or a save root\n"
         "                           (its newest complete checkpoint is merged)\n"
         "  OUTPUT_PATH              directory to write OUTPUT_PATH/model.safetensors into (created if needed)\n"
         "  --no-safe-serialization  write OUTPUT_PATH/pytorch_model.bin instead, a dict for\n"
         "                           torch.load(path, weights_only=True)\n"
         "  --remove-checkpoint-dir  delete CHECKPOINT_DIR after the merged file is written\n";
}

std::optional<MergeWeightsOptions> parse_merge_weights_args(const std::vector<std::string>& args) {
  MergeWeightsOptions options;
  std::vector<std::string> positional;
  for (const std::string& arg : args) {
    if (arg == "--help" || arg == "-h") return std::nullopt;
    if (arg == "--no-safe-serialization") {
      options.safe_serialization = false;
    } else if (arg == "--remove-checkpoint-dir") {
      options.remove_checkpoint_dir = true;
    } else if (arg.rfind("-", 0) == 0 && arg.size() > 1) {
      throw cli::UsageError("merge-weights: unknown option '" + arg + "' (see accel-host merge-weights --help)");
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.size() != 2) {
    throw cli::UsageError(strformat("merge-weights: expected CHECKPOINT_DIR and OUTPUT_PATH, got %zu argument(s) "
                                    "(see accel-host merge-weights --help)",
                                    positional.size()));
  }
  options.checkpoint_dir = positional[0];
  options.output_path = positional[1];
  if (options.remove_checkpoint_dir && is_within(options.output_path, options.checkpoint_dir)) {
    throw cli::UsageError("merge-weights: OUTPUT_PATH lies inside CHECKPOINT_DIR, which --remove-checkpoint-dir "
                          "would delete");
  }
  return options;
}

fs::path merge_weights(const MergeWeightsOptions& options) {
  const fs::path checkpoint = resolve_checkpoint(options.checkpoint_dir, kCommand);
  const NamedTensors tensors = read_whole_model(checkpoint, kCommand);
  int64_t elements = 0;
  for (const auto& [name, tensor] : tensors) elements += tensor.numel();
  create_output_directory(options.output_path, kCommand);
  const fs::path written = options.output_path / (options.safe_serialization ? kSafetensorsOutput : kPickleOutput);
  if (options.safe_serialization) {
    write_safetensors_file(written, tensors, kCommand);
  } else {
    write_pickle(written, tensors);
  }
  log::info(strformat("merged %zu tensors (%lld parameters) of %s into %s", tensors.size(),
                      static_cast<long long>(elements), checkpoint.c_str(), written.c_str()));

  if (options.remove_checkpoint_dir) {
    std::error_code error;
    fs::remove_all(options.checkpoint_dir, error);
    if (error) {
      throw CheckpointError("merge-weights: wrote " + written.string() + " but cannot remove '" +
                            options.checkpoint_dir.string() + "': " + error.message());
    }
    log::info("removed " + options.checkpoint_dir.string());
  }
  return written;
}

int merge_weights_command(const std::vector<std::string>& args, const comm::MpiSession& mpi) {
  log::init(mpi.rank(), log::Level::info);
  const std::optional<MergeWeightsOptions> options = parse_merge_weights_args(args);
  if (!options) {
    if (mpi.rank() == 0) std::fputs(merge_weights_usage().c_str(), stdout);
    return 0;
  }
  if (mpi.world_size() > 1) {
    throw cli::UsageError(strformat("merge-weights runs as one process, not on %d ranks (run it without mpirun)",
                                    mpi.world_size()));
  }
  merge_weights(*options);
  return 0;
}

}  // namespace accel::app
