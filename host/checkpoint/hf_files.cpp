// What the Hugging Face checkpoint readers share (see hf_files.h).
#include "host/checkpoint/hf_files.h"

#include <accel/sdk/input_file.hpp>
#include <accel/sdk/json_input.hpp>

#include <set>

namespace accel::checkpoint::hf {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// config.json and the shard index are small; anything far larger is not one.
constexpr std::uintmax_t kMaxJsonBytes = 64ull << 20;

}  // namespace

json read_json(const fs::path& path) {
  try {
    return sdk::parse_json(sdk::read_input_file(path.string(), kMaxJsonBytes), path.string());
  } catch (const sdk::InputFileError& e) {
    throw CheckpointError(e.what());
  } catch (const sdk::JsonInputError& e) {
    throw CheckpointError(e.what());
  }
}

std::vector<fs::path> weight_files(const fs::path& dir) {
  const fs::path single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
  if (fs::exists(single)) return {single};
  if (!fs::exists(index)) {
    throw CheckpointError(dir.string() + ": holds neither model.safetensors nor model.safetensors.index.json "
                          "(save the model with safe_serialization=True)");
  }
  const json map = read_json(index);
  const auto weights = map.find("weight_map");
  if (weights == map.end() || !weights->is_object()) throw CheckpointError(index.string() + ": \"weight_map\" is missing");
  std::set<std::string> names;
  for (const auto& [tensor, file] : weights->items()) {
    if (!file.is_string()) {
      throw CheckpointError(index.string() + ": the file of tensor " + sdk::describe(tensor) + " is " +
                            sdk::describe(file) + ", not a string");
    }
    const std::string name = file.get<std::string>();
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
      throw CheckpointError(index.string() + ": shard name " + sdk::describe(file) + " is not a file name in " +
                            dir.string());
    }
    names.insert(name);
  }
  std::vector<fs::path> files;
  for (const std::string& name : names) files.push_back(dir / name);
  return files;
}

}  // namespace accel::checkpoint::hf
