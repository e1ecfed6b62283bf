// What the Hugging Face checkpoint readers share (see hf_files.h).
#include "host/checkpoint/hf_files.h"

#include <fstream>
#include <set>
#include <sstream>

namespace accel::checkpoint::hf {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// config.json and the shard index are small; anything far larger is not one.
constexpr std::uintmax_t kMaxJsonBytes = 64ull << 20;

}  // namespace

json read_json(const fs::path& path) {
  std::error_code error;
  const std::uintmax_t size = fs::file_size(path, error);
  if (error) throw CheckpointError(path.string() + ": cannot read: " + error.message());
  if (size > kMaxJsonBytes) throw CheckpointError(path.string() + ": larger than any config (" + std::to_string(size) + " bytes)");
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) throw CheckpointError(path.string() + ": cannot read");
  try {
    return json::parse(text.str());
  } catch (const json::exception& e) {
    throw CheckpointError(path.string() + ": not valid JSON (" + e.what() + ")");
  }
}

int64_t positive_key(const json& config, const fs::path& path, const char* key) {
  const std::optional<int64_t> value = optional_key<int64_t>(config, path, key);
  if (!value) throw CheckpointError(path.string() + ": \"" + std::string(key) + "\" is missing");
  if (*value <= 0) throw CheckpointError(path.string() + ": \"" + std::string(key) + "\" must be positive, got " + std::to_string(*value));
  return *value;
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
    if (!file.is_string()) throw CheckpointError(index.string() + ": the file of " + tensor + " is not a string");
    const std::string name = file.get<std::string>();
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
      throw CheckpointError(index.string() + ": shard name '" + name + "' is not a file name in " + dir.string());
    }
    names.insert(name);
  }
  std::vector<fs::path> files;
  for (const std::string& name : names) files.push_back(dir / name);
  return files;
}

}  // namespace accel::checkpoint::hf
