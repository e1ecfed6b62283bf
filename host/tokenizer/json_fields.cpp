// Typed fields of a tokenizer.json's parts (see json_fields.h).
#include "host/tokenizer/json_fields.h"

#include <stdexcept>

#include "host/tokenizer/unicode.h"

namespace accel::tokenizer {
namespace {

const nlohmann::json& field(const nlohmann::json& config, const char* key, const std::string& part) {
  if (!config.is_object()) throw std::invalid_argument(part + " is not a JSON object");
  const auto it = config.find(key);
  if (it == config.end()) throw std::invalid_argument(part + " has no \"" + key + "\"");
  return *it;
}

}  // namespace

std::string type_of(const nlohmann::json& config, const std::string& part) {
  const nlohmann::json& type = field(config, "type", part);
  if (!type.is_string()) throw std::invalid_argument(part + "'s \"type\" is not a string");
  return type.get<std::string>();
}

const std::string& string_field(const nlohmann::json& config, const char* key, const std::string& part) {
  const nlohmann::json& value = field(config, key, part);
  if (!value.is_string()) throw std::invalid_argument(part + "'s \"" + key + "\" is not a string");
  return value.get_ref<const std::string&>();
}

const nlohmann::json& array_field(const nlohmann::json& config, const char* key, const std::string& part) {
  const nlohmann::json& value = field(config, key, part);
  if (!value.is_array()) throw std::invalid_argument(part + "'s \"" + key + "\" is not a list");
  return value;
}

bool bool_field(const nlohmann::json& config, const char* key, bool fallback, const std::string& part) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw std::invalid_argument(part + "'s \"" + key + "\" is not true or false");
  return it->get<bool>();
}

int64_t int_field(const nlohmann::json& config, const char* key, const std::string& part) {
  const nlohmann::json& value = field(config, key, part);
  if (!value.is_number_integer()) throw std::invalid_argument(part + "'s \"" + key + "\" is not a whole number");
  return value.get<int64_t>();
}

std::u32string string_pattern(const nlohmann::json& config, const std::string& part) {
  const nlohmann::json& pattern = field(config, "pattern", part);
  if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
    return utf8_to_u32(pattern["String"].get<std::string>());
  }
  throw std::invalid_argument(part + "'s pattern " + pattern.dump() + " is not supported (only {\"String\": ...})");
}

}  // namespace accel::tokenizer
