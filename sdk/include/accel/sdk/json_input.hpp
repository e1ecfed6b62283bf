// accel/sdk/json_input.hpp — the one rule for reading a JSON document that a
// user or another program wrote: Hugging Face config.json files, DeepSpeed
// configs, trainer_state.json, checkpoint manifests and metadata.
//
// The rule:
// - Depth: a document nesting deeper than kMaxJsonDepth is refused while it
//   is parsed. (nlohmann's parser and destructor do not recurse, but dump()
//   and every reader that walks the tree would.)
// - Exact types: an integer field takes a JSON integer only (256.9 and 1e19
//   are refused, never truncated or wrapped), a number is finite, a string
//   is a string, an object an object; ranges are checked after the type.
// - Bounded messages: an error quotes a value through describe(), which
//   prints a scalar (a string cut to 40 characters) and names an array or
//   object by its size: no message ever serialises an unbounded value.
//
// Header only; needs nlohmann_json (target nlohmann_json::nlohmann_json).
// Errors: JsonInputError, one line beginning with the document's name.
// Thread-safety: everything here is reentrant; a JsonFields borrows its
// object and must not outlive it, and records the keys read through it
// (consulted()), so one JsonFields is read by one thread at a time.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace accel::sdk {

// A document or field that breaks the rule; what() is the whole line.
class JsonInputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Deeper than any config the readers understand (DeepSpeed's go 3 levels,
// config.json's 2), far below what a recursive walk overflows at.
inline constexpr int kMaxJsonDepth = 64;

// A value as a message may show it: scalars as JSON text (a string cut to
// 40 characters), arrays and objects by their size only.
inline std::string describe(const nlohmann::json& value) {
  constexpr size_t kShown = 40;
  switch (value.type()) {
    case nlohmann::json::value_t::array:
      return "an array of " + std::to_string(value.size()) + " element(s)";
    case nlohmann::json::value_t::object:
      return "an object of " + std::to_string(value.size()) + " key(s)";
    case nlohmann::json::value_t::string: {
      const std::string& text = value.get_ref<const std::string&>();
      if (text.size() <= kShown) return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      const nlohmann::json cut = text.substr(0, kShown);
      std::string shown = cut.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      shown.insert(shown.size() - 1, "...");
      return shown + " (" + std::to_string(text.size()) + " characters)";
    }
    case nlohmann::json::value_t::binary:
      return "binary data";
    case nlohmann::json::value_t::discarded:
      return "a discarded value";
    default:  // null, boolean, numbers: short by nature
      return value.dump();
  }
}

// Parses one document. `where` names it in messages (a path, or "the
// DeepSpeed config"); the text is never quoted beyond nlohmann's position.
inline nlohmann::json parse_json(std::string_view text, const std::string& where, int max_depth = kMaxJsonDepth) {
  const auto limit_depth = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
    if ((event == nlohmann::json::parse_event_t::object_start || event == nlohmann::json::parse_event_t::array_start) &&
        depth >= max_depth) {
      throw JsonInputError(where + ": nests arrays or objects deeper than " + std::to_string(max_depth) + " levels");
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text, limit_depth);
  } catch (const nlohmann::json::exception& e) {
    // nlohmann quotes the token it stopped at ("last read: '...'", "number
    // overflow parsing '...'"), which runs as long as the input does: cut.
    constexpr size_t kShownReason = 160;
    std::string reason = e.what();
    if (reason.size() > kShownReason) reason = reason.substr(0, kShownReason) + "...";
    throw JsonInputError(where + ": not valid JSON (" + reason + ")");
  }
}

// The fields of one JSON object, read by the rule. Messages read
// `<where>: "<prefix><key>" <problem>`, where prefix names the enclosing
// objects ("zero_optimization.").
class JsonFields {
 public:
  JsonFields(const nlohmann::json& object, std::string where, std::string prefix = {})
      : object_(object), where_(std::move(where)), prefix_(std::move(prefix)) {
    if (!object_.is_object()) {
      const std::string what = prefix_.empty() ? "the document" : quoted_name(prefix_.substr(0, prefix_.size() - 1));
      throw JsonInputError(where_ + ": " + what + " must be a JSON object, got " + describe(object_));
    }
  }

  const nlohmann::json& json() const noexcept { return object_; }
  const std::string& where() const noexcept { return where_; }

  // Present, null or not.
  bool contains(const char* key) const {
    consulted_.insert(key);
    return object_.contains(key);
  }
  // Present and not null (config.json writes absent values as null).
  bool has_value(const char* key) const {
    consulted_.insert(key);
    const auto it = object_.find(key);
    return it != object_.end() && !it->is_null();
  }

  // Refuses keys outside `known`: a field the reader does not understand
  // would otherwise be ignored without a word.
  void only(std::initializer_list<const char*> known) const {
    const std::set<std::string> allowed(known.begin(), known.end());
    for (const auto& item : object_.items()) {
      if (!allowed.count(item.key())) fail(item.key(), "is not a known field");
    }
  }

  int64_t integer(const char* key, int64_t min = std::numeric_limits<int64_t>::min(),
                  int64_t max = std::numeric_limits<int64_t>::max()) const {
    return integer_value(key, at(key), min, max);
  }
  std::optional<int64_t> optional_integer(const char* key, int64_t min = std::numeric_limits<int64_t>::min(),
                                          int64_t max = std::numeric_limits<int64_t>::max()) const {
    if (!has_value(key)) return std::nullopt;
    return integer(key, min, max);
  }
  uint64_t unsigned_integer(const char* key) const {
    const nlohmann::json& v = at(key);
    if (!v.is_number_unsigned()) fail(key, "must be an integer >= 0, got " + describe(v));
    return v.get<uint64_t>();
  }

  // A finite number within [min, max].
  double number(const char* key, double min = -std::numeric_limits<double>::max(),
                double max = std::numeric_limits<double>::max()) const {
    const nlohmann::json& v = at(key);
    if (!v.is_number()) fail(key, "must be a number, got " + describe(v));
    const double value = v.get<double>();
    if (!std::isfinite(value)) fail(key, "must be a finite number, got " + describe(v));
    if (value < min) fail(key, "must be at least " + shortest(min) + ", got " + describe(v));
    if (value > max) fail(key, "must be at most " + shortest(max) + ", got " + describe(v));
    return value;
  }
  std::optional<double> optional_number(const char* key, double min = -std::numeric_limits<double>::max(),
                                        double max = std::numeric_limits<double>::max()) const {
    if (!has_value(key)) return std::nullopt;
    return number(key, min, max);
  }
  // A finite number > 0 (epsilons, scales, rope theta).
  double positive_finite(const char* key) const {
    const nlohmann::json& v = at(key);
    if (!v.is_number()) fail(key, "must be a number, got " + describe(v));
    const double value = v.get<double>();
    if (!std::isfinite(value) || value <= 0.0) fail(key, "must be a finite number > 0, got " + describe(v));
    return value;
  }

  bool boolean(const char* key) const {
    const nlohmann::json& v = at(key);
    if (!v.is_boolean()) fail(key, "must be true or false, got " + describe(v));
    return v.get<bool>();
  }
  std::string string(const char* key) const {
    const nlohmann::json& v = at(key);
    if (!v.is_string()) fail(key, "must be a string, got " + describe(v));
    return v.get<std::string>();
  }
  std::optional<std::string> optional_string(const char* key) const {
    if (!has_value(key)) return std::nullopt;
    return string(key);
  }
  JsonFields object(const char* key) const { return JsonFields(at(key), where_, prefix_ + key + "."); }
  const nlohmann::json& array(const char* key) const {
    const nlohmann::json& v = at(key);
    if (!v.is_array()) fail(key, "must be an array, got " + describe(v));
    return v;
  }
  // An array of integers, each by the rule and within [min, max] (a shape,
  // an offset); element i is named "<key>[i]" in messages.
  std::vector<int64_t> integer_array(const char* key, int64_t min = std::numeric_limits<int64_t>::min(),
                                     int64_t max = std::numeric_limits<int64_t>::max()) const {
    return integer_list(key, at(key), min, max);
  }
  // The same for any value (an element of an array field), named `name`.
  std::vector<int64_t> integer_list(const std::string& name, const nlohmann::json& v,
                                    int64_t min = std::numeric_limits<int64_t>::min(),
                                    int64_t max = std::numeric_limits<int64_t>::max()) const {
    if (!v.is_array()) fail(name, "must be an array of integers, got " + describe(v));
    std::vector<int64_t> values;
    values.reserve(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      values.push_back(integer_value(name + "[" + std::to_string(i) + "]", v[i], min, max));
    }
    return values;
  }
  // The raw value, present (for fields whose type decides their meaning).
  const nlohmann::json& value(const char* key) const { return at(key); }

  // An element of an array field (or any value) as an integer by the rule;
  // `key` names it in the message ("weight_map.x").
  int64_t integer_value(const std::string& key, const nlohmann::json& v,
                        int64_t min = std::numeric_limits<int64_t>::min(),
                        int64_t max = std::numeric_limits<int64_t>::max()) const {
    if (!v.is_number_integer()) fail(key, "must be an integer, got " + describe(v));
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(max)) {
      fail(key, "must be at most " + std::to_string(max) + ", got " + describe(v));
    }
    const int64_t value = v.get<int64_t>();
    if (value < min) fail(key, "must be at least " + std::to_string(min) + ", got " + describe(v));
    if (value > max) fail(key, "must be at most " + std::to_string(max) + ", got " + describe(v));
    return value;
  }

  // The key (and the prefix, when a reader names an object by its key in
  // the document) may be the document's own text, as where only() names an
  // unknown one: it is shown escaped (a newline in it cannot break the line)
  // and cut after 128 characters, so the message stays one bounded line.
  [[noreturn]] void fail(const std::string& key, const std::string& problem) const {
    throw JsonInputError(where_ + ": " + quoted_name(prefix_ + key) + " " + problem);
  }

  // Every key a reader asked about through this object (present or not, by
  // any accessor above): a caller compares them with the document's keys to
  // name the ones no reader looked at, so none is dropped without a word.
  const std::set<std::string>& consulted() const noexcept { return consulted_; }

 private:
  const nlohmann::json& at(const char* key) const {
    consulted_.insert(key);
    const auto it = object_.find(key);
    if (it == object_.end()) fail(key, "is missing");
    return *it;
  }
  // `name` in double quotes, escaped, cut after 128 characters.
  static std::string quoted_name(const std::string& name) {
    constexpr size_t kShownName = 128;
    const nlohmann::json cut = name.size() <= kShownName ? name : name.substr(0, kShownName) + "...";
    return cut.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  static std::string shortest(double value) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.17g", value);
    for (int precision = 1; precision <= 17; ++precision) {
      std::snprintf(text, sizeof(text), "%.*g", precision, value);
      if (std::strtod(text, nullptr) == value) break;
    }
    return text;
  }

  const nlohmann::json& object_;
  std::string where_;
  std::string prefix_;
  mutable std::set<std::string> consulted_;  // a record of reads, not the object's state
};

}  // namespace accel::sdk
