// Reading the parts of a tokenizer.json: a field of the wrong type or a
// missing one is a std::invalid_argument naming the part and the field.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace accel::tokenizer {

// config["type"], which every normalizer, pre-tokenizer, decoder and model has.
std::string type_of(const nlohmann::json& config, const std::string& part);

const std::string& string_field(const nlohmann::json& config, const char* key, const std::string& part);
const nlohmann::json& array_field(const nlohmann::json& config, const char* key, const std::string& part);
// A missing or null field is `fallback`.
bool bool_field(const nlohmann::json& config, const char* key, bool fallback, const std::string& part);
int64_t int_field(const nlohmann::json& config, const char* key, const std::string& part);

// A "pattern": {"String": "..."}; {"Regex": ...} is refused by name.
std::u32string string_pattern(const nlohmann::json& config, const std::string& part);

}  // namespace accel::tokenizer
