// config.json of a Hugging Face checkpoint (see hf_config.h): the document
// read by the one JSON rule, then handed to the bridge of its model_type
// (hf_bridge.h), which takes every key it understands through
// sdk::JsonFields, so a wrong type, a fraction where an integer belongs, or
// a value out of range is refused with the key's name and the value as
// describe() shows it. Keys the bridge never consulted and that are not
// inert (bridges/inert_keys.h) are named in `ignored`, one line each.
#include "host/checkpoint/hf_config.h"

#include <accel/sdk/input_file.hpp>
#include <accel/sdk/json_input.hpp>
#include <nlohmann/json.hpp>

#include <optional>

#include "host/checkpoint/bridges/inert_keys.h"
#include "host/checkpoint/hf_bridge.h"

namespace accel::checkpoint {

namespace fs = std::filesystem;
using sdk::describe;
using sdk::JsonFields;

HfModelConfig parse_hf_config(std::string_view text, const std::string& where) {
  try {
    const nlohmann::json document = sdk::parse_json(text, where);
    const JsonFields config(document, where);
    const std::optional<std::string> type = config.optional_string("model_type");
    if (!type) config.fail("model_type", "is missing (supported: " + supported_model_types() + ")");
    const HfBridge* bridge = find_hf_bridge(*type);
    if (bridge == nullptr) {
      config.fail("model_type", "is " + describe(config.value("model_type")) +
                                    ", which is not supported (supported: " + supported_model_types() + ")");
    }
    HfModelConfig model = bridge->read(config);
    model.model_type = bridge->model_type;
    // A key no bridge looked at and not known to be inert may change what
    // transformers computes: named, never dropped without a word.
    for (const auto& item : document.items()) {
      if (config.consulted().count(item.key()) == 0 && !bridge::is_inert_hf_config_key(item.key())) {
        model.ignored.push_back(describe(nlohmann::json(item.key())) + ", a key accel-host's " +
                                bridge->display_name +
                                " bridge does not read (if it changes the model, this run differs from transformers)");
      }
    }
    return model;
  } catch (const sdk::JsonInputError& e) {
    throw CheckpointError(e.what());
  }
}

HfModelConfig read_hf_config(const fs::path& dir) {
  const fs::path path = dir / "config.json";
  if (!fs::is_directory(dir)) throw CheckpointError("--init-from hf:" + dir.string() + ": not a directory");
  if (!fs::exists(path)) throw CheckpointError(dir.string() + ": no config.json (a transformers save_pretrained directory has one)");
  std::string text;
  try {
    text = sdk::read_input_file(path.string(), kMaxHfConfigBytes);
  } catch (const sdk::InputFileError& e) {
    throw CheckpointError(e.what());
  }
  return parse_hf_config(text, path.string());
}

std::string hf_config_json(const model::GptConfig& shape, const HfConfigKeys& keys) {
  return hf_bridge_for(shape, keys).config_json(shape, keys);
}

}  // namespace accel::checkpoint
