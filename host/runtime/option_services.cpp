// The option area of the services table (accel/options.h): typed lookups of
// the values the host parsed from flags and config files into
// HostContext::options before any plugin's create hook ran.
//
// Name resolution: "NAME" is an option of the calling plugin's own section
// (AccelHost::plugin_name); "SECTION.NAME" is NAME in another section (the
// host's "train", another plugin's). Option names never contain a dot, so the
// first dot separates the section.
//
// Thread-safety: the store is immutable once parsed, so every lookup may run
// on any thread without locking. Strings handed out point into the store and
// live as long as the context (longer than the ABI's "until teardown").
#include <accel/accel.h>

#include <string>
#include <string_view>

#include "host/runtime/host_context.h"
#include "host/runtime/service_support.h"

namespace accel::runtime {
namespace {

const char* type_name(AccelOptionType type) {
  switch (type) {
    case ACCEL_OPTION_BOOL: return "BOOL";
    case ACCEL_OPTION_INT: return "INT";
    case ACCEL_OPTION_DOUBLE: return "DOUBLE";
    case ACCEL_OPTION_STRING: return "STRING";
    case ACCEL_OPTION_ENUM: return "ENUM";
    default: return "unknown type";
  }
}

struct ResolvedOption {
  std::string full_name;  // "section.name", for messages
  const OptionValue* value;
};

// Finds `name` for the calling plugin; throws NOT_FOUND / INVALID_ARGUMENT.
ResolvedOption resolve(AccelHost* host, const char* name) {
  HostContext& context = context_of(host);
  if (name == nullptr || *name == '\0') fail(ACCEL_ERROR_INVALID_ARGUMENT, "option name is NULL or empty");
  const std::string_view text(name);
  std::string_view section = plugin_name_of(host);
  std::string_view option = text;
  if (const size_t dot = text.find('.'); dot != std::string_view::npos) {
    section = text.substr(0, dot);
    option = text.substr(dot + 1);
    if (section.empty() || option.empty()) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, "option name '" + std::string(text) + "' is not NAME or SECTION.NAME");
    }
  }
  std::string full_name = std::string(section) + "." + std::string(option);
  const OptionValue* value = context.options.find(section, option);
  if (value == nullptr) {
    bool section_known = false;
    const std::string prefix = std::string(section) + ".";
    for (const auto& [key, unused] : context.options.all()) {
      if (key.compare(0, prefix.size(), prefix) == 0) {
        section_known = true;
        break;
      }
    }
    fail(ACCEL_ERROR_NOT_FOUND,
         section_known ? "no option '" + full_name + "'"
                       : "no option '" + full_name + "' (no section '" + std::string(section) +
                             "': plugin not loaded?)");
  }
  return ResolvedOption{std::move(full_name), value};
}

[[noreturn]] void wrong_type(const ResolvedOption& option, const char* wanted) {
  fail(ACCEL_ERROR_INVALID_ARGUMENT, "option '" + option.full_name + "' is " +
                                         type_name(option.value->type) + ", not " + wanted);
}

template <class T>
void require_out(T* out) {
  if (out == nullptr) fail(ACCEL_ERROR_INVALID_ARGUMENT, "the output pointer is NULL");
}

AccelStatus get_bool(AccelHost* host, const char* name, bool* value) {
  return call_service("get_bool", [&] {
    require_out(value);
    const ResolvedOption option = resolve(host, name);
    if (option.value->type != ACCEL_OPTION_BOOL) wrong_type(option, "BOOL");
    *value = option.value->as_bool;
  });
}

AccelStatus get_int(AccelHost* host, const char* name, int64_t* value) {
  return call_service("get_int", [&] {
    require_out(value);
    const ResolvedOption option = resolve(host, name);
    if (option.value->type != ACCEL_OPTION_INT) wrong_type(option, "INT");
    *value = option.value->as_int;
  });
}

AccelStatus get_double(AccelHost* host, const char* name, double* value) {
  return call_service("get_double", [&] {
    require_out(value);
    const ResolvedOption option = resolve(host, name);
    if (option.value->type == ACCEL_OPTION_DOUBLE) {
      *value = option.value->as_double;
    } else if (option.value->type == ACCEL_OPTION_INT) {
      *value = static_cast<double>(option.value->as_int);
    } else {
      wrong_type(option, "DOUBLE or INT");
    }
  });
}

AccelStatus get_string(AccelHost* host, const char* name, const char** value) {
  return call_service("get_string", [&] {
    require_out(value);
    const ResolvedOption option = resolve(host, name);
    if (option.value->type != ACCEL_OPTION_STRING && option.value->type != ACCEL_OPTION_ENUM) {
      wrong_type(option, "STRING or ENUM");
    }
    *value = option.value->has_value ? option.value->text.c_str() : nullptr;
  });
}

AccelStatus get_enum(AccelHost* host, const char* name, int32_t* index) {
  return call_service("get_enum", [&] {
    require_out(index);
    const ResolvedOption option = resolve(host, name);
    if (option.value->type != ACCEL_OPTION_ENUM) wrong_type(option, "ENUM");
    if (option.value->enum_index < 0) {
      fail(ACCEL_ERROR_INTERNAL, "option '" + option.full_name + "' holds no parsed ENUM index");
    }
    *index = option.value->enum_index;
  });
}

AccelStatus is_set(AccelHost* host, const char* name, bool* given) {
  return call_service("is_set", [&] {
    require_out(given);
    *given = resolve(host, name).value->given;
  });
}

}  // namespace

const AccelOptionServices* option_services_table() {
  static const AccelOptionServices table{
      sizeof(AccelOptionServices), nullptr, &get_bool, &get_int, &get_double,
      &get_string,                 &get_enum, &is_set};
  return &table;
}

}  // namespace accel::runtime
