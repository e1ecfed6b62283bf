// Option value parsing (see option_values.h).
#include "host/plugin/option_values.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace accel::plugin {
namespace {

bool parse_int(const std::string& text, int64_t* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = value;
  return true;
}

bool parse_double(const std::string& text, double* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (errno != 0 || *end != '\0') return false;
  *out = value;
  return true;
}

std::optional<bool> parse_bool(const std::string& text) {
  if (text == "true" || text == "1" || text == "yes" || text == "on") return true;
  if (text == "false" || text == "0" || text == "no" || text == "off") return false;
  return std::nullopt;
}

std::string allowed_list(const AccelOptionSpec& spec) {
  std::string list;
  for (size_t i = 0; i < spec.num_allowed_values; ++i) {
    list += (i ? ", " : "") + std::string(spec.allowed_values[i] ? spec.allowed_values[i] : "(null)");
  }
  return list;
}

// Checks min/max bounds given in text form; false with *why on violation.
bool within_bounds(const AccelOptionSpec& spec, double value, const std::string& text, std::string* why) {
  double bound = 0;
  if (spec.min_value && parse_double(spec.min_value, &bound) && value < bound) {
    *why = "'" + text + "' is below the minimum " + spec.min_value;
    return false;
  }
  if (spec.max_value && parse_double(spec.max_value, &bound) && value > bound) {
    *why = "'" + text + "' is above the maximum " + spec.max_value;
    return false;
  }
  return true;
}

}  // namespace

const char* option_type_name(AccelOptionType type) {
  switch (type) {
    case ACCEL_OPTION_BOOL: return "bool";
    case ACCEL_OPTION_INT: return "int";
    case ACCEL_OPTION_DOUBLE: return "double";
    case ACCEL_OPTION_STRING: return "string";
    case ACCEL_OPTION_ENUM: return "enum";
    default: return "unknown";
  }
}

std::optional<runtime::OptionValue> parse_option_value(const AccelOptionSpec& spec, const std::string& text,
                                                       std::string* why) {
  runtime::OptionValue value;
  value.type = spec.type;
  value.text = text;
  switch (spec.type) {
    case ACCEL_OPTION_BOOL: {
      const auto parsed = parse_bool(text);
      if (!parsed) {
        *why = "'" + text + "' is not a bool (true/false, 1/0, yes/no, on/off)";
        return std::nullopt;
      }
      value.as_bool = *parsed;
      return value;
    }
    case ACCEL_OPTION_INT:
      if (!parse_int(text, &value.as_int)) {
        *why = "'" + text + "' is not an integer";
        return std::nullopt;
      }
      if (!within_bounds(spec, static_cast<double>(value.as_int), text, why)) return std::nullopt;
      value.as_double = static_cast<double>(value.as_int);
      return value;
    case ACCEL_OPTION_DOUBLE:
      if (!parse_double(text, &value.as_double)) {
        *why = "'" + text + "' is not a number";
        return std::nullopt;
      }
      if (!std::isfinite(value.as_double)) {
        *why = "'" + text + "' is not a finite number";
        return std::nullopt;
      }
      if (!within_bounds(spec, value.as_double, text, why)) return std::nullopt;
      return value;
    case ACCEL_OPTION_STRING:
    case ACCEL_OPTION_ENUM: {
      if (spec.num_allowed_values == 0 && spec.type == ACCEL_OPTION_STRING) return value;
      for (size_t i = 0; i < spec.num_allowed_values; ++i) {
        if (spec.allowed_values[i] && text == spec.allowed_values[i]) {
          value.enum_index = static_cast<int32_t>(i);
          return value;
        }
      }
      *why = "'" + text + "' is not one of: " + allowed_list(spec);
      return std::nullopt;
    }
    default:
      *why = "has an unknown type";
      return std::nullopt;
  }
}

}  // namespace accel::plugin
