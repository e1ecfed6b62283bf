// accel/sdk/error.hpp — the SDK's exception type, and the barrier that keeps
// every C++ exception on the plugin's side of the C ABI.
//
// Inside a plugin, failures travel as exceptions: throw accel::sdk::Error (a
// status and a message), or let any std::exception escape a hook. At the
// boundary, guard() catches everything, hands the message to the host with
// services->set_error (the host copies it and prefixes the plugin and hook:
// "myplugin: setup: ...") and returns the status. Nothing C++ ever unwinds
// into the host. An Error with an empty message returns its status without
// set_error: it propagates a failed service call (or the next link of the
// linear chain) whose message the host already holds (accel/status.h).
//
// Header only, compiled into the plugin. Thread-safety: guard() may run on
// any thread; the pending message is the calling thread's.
#pragma once

#include <accel/accel.h>

#include <cstdarg>
#include <cstdio>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

namespace accel::sdk {

// A failure with an ABI status. Error(status) alone propagates a failure whose
// message is already pending in the host; Error(status, "context") adds
// context, which the host prepends to any pending message.
class Error : public std::runtime_error {
 public:
  Error(AccelStatus status, const std::string& message)
      : std::runtime_error(message),
        status_(status == ACCEL_OK ? ACCEL_ERROR_INTERNAL : status) {}
  explicit Error(AccelStatus status) : Error(status, std::string()) {}

  AccelStatus status() const noexcept { return status_; }

 private:
  AccelStatus status_;
};

// printf into a std::string, for messages: Error(s, format("unit %d", u)).
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 1, 2)))
#endif
inline std::string format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list measure;
  va_copy(measure, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, measure);
  va_end(measure);
  std::string text(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(text.data(), text.size() + 1, fmt, args);
  va_end(args);
  return text;
}

// Runs fn(); returns ACCEL_OK, or the status of whatever it threw after
// reporting the message through set_error. Never throws. `services` may be
// NULL (then nothing is reported, the status still is).
template <typename Fn>
AccelStatus guard(AccelHost* host, const AccelHostServices* services,
                  Fn&& fn) noexcept {
  const auto report = [&](AccelStatus status, const char* message) {
    if (services != nullptr && services->set_error != nullptr &&
        message[0] != '\0') {
      services->set_error(host, status, message);  // the host copies it
    }
    return status;
  };
  try {
    std::forward<Fn>(fn)();
    return ACCEL_OK;
  } catch (const Error& e) {
    return report(e.status(), e.what());
  } catch (const std::bad_alloc&) {
    return report(ACCEL_ERROR_OUT_OF_MEMORY,
                  "out of host memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    // A fixed buffer: building a std::string here could throw again.
    char message[1024];
    std::snprintf(message, sizeof(message), "uncaught exception: %s",
                  e.what());
    return report(ACCEL_ERROR_INTERNAL, message);
  } catch (...) {
    return report(ACCEL_ERROR_INTERNAL,
                  "uncaught exception of a type not derived from "
                  "std::exception");
  }
}

}  // namespace accel::sdk
