// accel/sdk/services.hpp — a C++ face on the services table
// (accel/services.h): identity, logging (printf-style or streamed), typed
// option lookup, metrics and trace ranges, and check() that turns a failed
// service call into an accel::sdk::Error.
//
// Services is a value (the plugin's AccelHost* and the host's table); copy it
// freely. It is valid from the entry call until the plugin's teardown
// returned, like the table itself. Lookups that fail throw Error; logging,
// metrics and trace never fail and never throw (a missing optional service is
// a no-op). Thread-safety: as the underlying service — logging, options,
// metrics and trace may be called from any thread.
#pragma once

#include <accel/accel.h>

#include <algorithm>
#include <cstdarg>
#include <cstring>
#include <cstdio>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>

#include "accel/sdk/error.hpp"

namespace accel::sdk {

// ACCEL_HAS_FN in C++: whether `table`, filled by the other side, is long
// enough to hold `field` (its struct_size) and has it set. A NULL table or
// function means "not supported".
//   if (has_fn(services.table()->comm, &AccelCommServices::all_reduce)) ...
template <typename Table, typename Fn>
bool has_fn(const Table* table, Fn Table::*field) noexcept {
  if (table == nullptr) return false;
  const auto* begin = reinterpret_cast<const char*>(table);
  const auto* member = reinterpret_cast<const char*>(&(table->*field));
  return static_cast<size_t>(member - begin) + sizeof(Fn) <=
             table->struct_size &&
         table->*field != nullptr;
}

// The ABI version of the host that loaded this library, as its entry call
// was told (AccelHostInfo.abi_version, recorded by init_plugin); {0, 0}
// before that call, or when a test drives a plugin without one. A plugin
// reads it before relying on a meaning that a minor gave without a new
// field, which has_fn cannot see (1.7: the in-place reduce_scatter).
// Written once, by the entry call, before any hook runs.
namespace detail {
inline AccelAbiVersion loaded_host_abi{0, 0};
}  // namespace detail
inline AccelAbiVersion host_abi_version() noexcept { return detail::loaded_host_abi; }
inline bool host_abi_at_least(uint32_t major, uint32_t minor) noexcept {
  const AccelAbiVersion v = detail::loaded_host_abi;
  return v.major == major && v.minor >= minor;
}

class LogLine;

class Services {
 public:
  Services(AccelHost* host, const AccelHostServices* table) noexcept
      : host_(host), table_(table) {}

  AccelHost* host() const noexcept { return host_; }
  const AccelHostServices* table() const noexcept { return table_; }

  // ---------------------------------------------------------------- errors
  // Throws Error(status, context) unless status is ACCEL_OK. The service's
  // own message is pending in the host; `context` (optional) is prepended.
  void check(AccelStatus status, const std::string& context = {}) const {
    if (status != ACCEL_OK) throw Error(status, context);
  }
  void set_error(AccelStatus status, const char* message) const noexcept {
    if (table_ != nullptr && table_->set_error != nullptr)
      table_->set_error(host_, status, message);
  }
  // The message of this thread's last failed service call ("" if none).
  std::string last_error() const {
    const char* m = table_ != nullptr && table_->last_error != nullptr
                        ? table_->last_error(host_)
                        : nullptr;
    return m != nullptr ? m : "";
  }

  // -------------------------------------------------------------- identity
  const AccelIdentity& identity() const {
    const AccelIdentity* id = nullptr;
    check(table_->get_identity(host_, &id), "get_identity");
    return *id;
  }
  int rank() const { return identity().rank; }
  int world_size() const { return identity().world_size; }

  // --------------------------------------------------------------- logging
  bool log_enabled(AccelLogLevel level) const noexcept {
    return table_ != nullptr && table_->log != nullptr &&
           (table_->log_enabled == nullptr ||
            table_->log_enabled(host_, level));
  }
  void log(AccelLogLevel level, const char* message) const noexcept {
    if (table_ != nullptr && table_->log != nullptr)
      table_->log(host_, level, message);
  }
  void log(AccelLogLevel level, const std::string& message) const noexcept {
    log(level, message.c_str());
  }
#if defined(__GNUC__) || defined(__clang__)
  __attribute__((format(printf, 3, 4)))
#endif
  void logf(AccelLogLevel level, const char* fmt, ...) const noexcept {
    if (!log_enabled(level)) return;
    char line[2048];  // longer lines are cut, never allocated
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(line, sizeof(line), fmt, args);
    va_end(args);
    log(level, line);
  }
  // Streamed: services.warn() << "x = " << x;  (one line, written at ';')
  inline LogLine stream(AccelLogLevel level) const;
  inline LogLine debug() const;
  inline LogLine info() const;
  inline LogLine warn() const;
  inline LogLine error() const;

  // --------------------------------------------------------------- options
  // option<T>("name") reads an option of this plugin ("name") or another
  // section ("train.max_grad_norm"). T: bool, any integer type (range
  // checked), float/double, std::string ("" when unset) or const char*
  // (host-owned, NULL when unset). Throws Error on a missing option, a type
  // mismatch, or a host without option lookup.
  template <typename T>
  T option(const char* name) const {
    const std::string context = std::string("option '") + name + "'";
    if constexpr (std::is_same_v<T, bool>) {
      bool value = false;
      check(option_fn(&AccelOptionServices::get_bool, name)(host_, name, &value),
            context);
      return value;
    } else if constexpr (std::is_integral_v<T>) {
      int64_t value = 0;
      check(option_fn(&AccelOptionServices::get_int, name)(host_, name, &value),
            context);
      if (value < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
          (value > 0 && static_cast<uint64_t>(value) >
                            static_cast<uint64_t>(
                                std::numeric_limits<T>::max()))) {
        throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                    context + format(": %lld is out of range",
                                     static_cast<long long>(value)));
      }
      return static_cast<T>(value);
    } else if constexpr (std::is_floating_point_v<T>) {
      double value = 0.0;
      check(option_fn(&AccelOptionServices::get_double, name)(host_, name,
                                                               &value),
            context);
      return static_cast<T>(value);
    } else if constexpr (std::is_same_v<T, const char*> ||
                         std::is_same_v<T, std::string>) {
      const char* value = nullptr;
      check(option_fn(&AccelOptionServices::get_string, name)(host_, name,
                                                               &value),
            context);
      if constexpr (std::is_same_v<T, std::string>) {
        return value != nullptr ? value : "";
      } else {
        return value;
      }
    } else {
      static_assert(std::is_same_v<T, bool>, "unsupported option type");
    }
  }
  // An ENUM option as the index of its value in the allowed values.
  int32_t option_index(const char* name) const {
    int32_t index = -1;
    check(option_fn(&AccelOptionServices::get_enum, name)(host_, name, &index),
          std::string("option '") + name + "'");
    return index;
  }
  // Whether the user gave the option (flag or config) rather than its default.
  bool option_is_set(const char* name) const {
    bool is_set = false;
    check(option_fn(&AccelOptionServices::is_set, name)(host_, name, &is_set),
          std::string("option '") + name + "'");
    return is_set;
  }

  // ------------------------------------------------------ precision policy
  // The run's precision policy (accel/precision.h): every dtype bits == 0
  // (the owners' defaults) when no plugin set one, or on a host before 1.8,
  // which has no policy. Read it from plan_model on.
  AccelPrecisionPolicy precision_policy() const {
    AccelPrecisionPolicy none{};
    none.struct_size = sizeof(none);
    if (table_ == nullptr ||
        !ACCEL_STRUCT_HAS_FIELD(table_, AccelHostServices, precision) ||
        !has_fn(table_->precision, &AccelPrecisionServices::get_policy)) {
      return none;
    }
    const AccelPrecisionPolicy* policy = nullptr;
    check(table_->precision->get_policy(host_, &policy), "precision.get_policy");
    if (policy == nullptr) return none;
    AccelPrecisionPolicy copy = none;
    std::memcpy(&copy, policy, std::min(policy->struct_size, sizeof(copy)));
    copy.struct_size = sizeof(copy);
    return copy;
  }
  // Sets it (a PRECISION plugin, from its create). Throws Error with the
  // host's reason, or UNSUPPORTED on a host before 1.8.
  void set_precision_policy(const AccelPrecisionPolicy& policy) const {
    if (table_ == nullptr ||
        !ACCEL_STRUCT_HAS_FIELD(table_, AccelHostServices, precision) ||
        !has_fn(table_->precision, &AccelPrecisionServices::set_policy)) {
      throw Error(ACCEL_ERROR_UNSUPPORTED,
                  "this host has no precision policy (ABI 1.8); it cannot "
                  "change how gradients travel or moments are stored");
    }
    check(table_->precision->set_policy(host_, &policy), "precision.set_policy");
  }

  // ----------------------------------------------------------- trace, metrics
  // Records a per-step metric (accel/trace.h); a no-op on a host without one.
  void metric(const char* name, double value,
              AccelMetricReduce reduce = ACCEL_METRIC_LAST) const noexcept {
    const AccelTraceServices* t = table_ != nullptr ? table_->trace : nullptr;
    if (has_fn(t, &AccelTraceServices::metric))
      t->metric(host_, name, value, reduce);
  }
  void counter(const char* name, const char* category,
               double value) const noexcept {
    const AccelTraceServices* t = table_ != nullptr ? table_->trace : nullptr;
    if (has_fn(t, &AccelTraceServices::counter))
      t->counter(host_, name, category, value);
  }

 private:
  // The option lookup `field` of this host, or throws UNSUPPORTED.
  template <typename Fn>
  Fn* option_fn(Fn* AccelOptionServices::*field, const char* name) const {
    const AccelOptionServices* o = table_ != nullptr ? table_->options
                                                     : nullptr;
    if (!has_fn(o, field)) {
      throw Error(ACCEL_ERROR_UNSUPPORTED,
                  std::string("option '") + name +
                      "': this host offers no option lookup of that type");
    }
    return o->*field;
  }

  AccelHost* host_;
  const AccelHostServices* table_;
};

// One log line built with <<, written when the statement ends. Formatting is
// skipped entirely when the level is disabled.
class LogLine {
 public:
  LogLine(const Services& services, AccelLogLevel level)
      : services_(services), level_(level),
        enabled_(services.log_enabled(level)) {}
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;
  ~LogLine() {
    if (!enabled_) return;
    try {
      services_.log(level_, text_.str());
    } catch (...) {  // std::bad_alloc from str(): drop the line
    }
  }
  template <typename V>
  LogLine& operator<<(const V& value) {
    if (enabled_) text_ << value;
    return *this;
  }

 private:
  const Services& services_;
  AccelLogLevel level_;
  bool enabled_;
  std::ostringstream text_;
};

inline LogLine Services::stream(AccelLogLevel level) const {
  return LogLine(*this, level);
}
inline LogLine Services::debug() const { return stream(ACCEL_LOG_DEBUG); }
inline LogLine Services::info() const { return stream(ACCEL_LOG_INFO); }
inline LogLine Services::warn() const { return stream(ACCEL_LOG_WARN); }
inline LogLine Services::error() const { return stream(ACCEL_LOG_ERROR); }

// A trace range, open for the lifetime of the object. `name` and `category`
// must outlive it (string literals).
class TraceRange {
 public:
  TraceRange(const Services& services, const char* name,
             const char* category, AccelStream stream = nullptr) noexcept
      : services_(services), name_(name), category_(category),
        stream_(stream) {
    const AccelTraceServices* t = trace();
    if (has_fn(t, &AccelTraceServices::begin))
      t->begin(services_.host(), name_, category_, stream_);
  }
  TraceRange(const TraceRange&) = delete;
  TraceRange& operator=(const TraceRange&) = delete;
  ~TraceRange() {
    const AccelTraceServices* t = trace();
    if (has_fn(t, &AccelTraceServices::end))
      t->end(services_.host(), name_, category_, stream_);
  }

 private:
  const AccelTraceServices* trace() const noexcept {
    return services_.table() != nullptr ? services_.table()->trace : nullptr;
  }
  Services services_;
  const char* name_;
  const char* category_;
  AccelStream stream_;
};

}  // namespace accel::sdk
