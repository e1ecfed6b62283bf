/* accel/status.h — status codes, and the one rule for error messages.
 *
 * Defines: AccelStatus, accel_status_name(), and the function types of the
 * two error services (AccelSetErrorFn, AccelLastErrorFn) that live in the
 * core of the services table (accel/services.h).
 *
 * Every function of the ABI, in either direction, returns an AccelStatus.
 * The exceptions cannot fail: logging, trace events and metrics, and the
 * observer's trace_event hook return void; log_enabled and trace `enabled`
 * return bool.
 *
 * THE MESSAGE RULE. An error message always lives in the host; no message
 * pointer ever travels from a plugin to the host, and nobody frees one.
 *  - A plugin that fails (entry call or hook) calls `set_error(host, status,
 *    message)` and then returns that non-OK status. The host copies the
 *    message before set_error returns — the plugin may pass a stack buffer —
 *    and prefixes the plugin's name and the hook: "fsdp: setup: ...".
 *    A plugin that returns non-OK without calling set_error still fails
 *    cleanly; the host reports "fsdp: setup: failed (ACCEL_ERROR_INTERNAL)".
 *  - A service (host) that fails returns non-OK; the message is then read
 *    with `last_error(host)`: a host-owned NUL-terminated string, valid until
 *    the plugin's next service call on the same thread. It names the service
 *    and, for a failure on another rank, that rank.
 *  - A plugin that propagates a failure it received (from a service, or from
 *    the `next` link of a middleware chain) returns the same status without
 *    calling set_error — the message is already pending — or calls set_error
 *    to add context, which the host prepends: "megatron: linear_forward:
 *    row all-reduce: fp8: cast: ...".
 * The pending message is per thread. The host clears it before each call into
 * a plugin and ignores it when the plugin returns ACCEL_OK.
 *
 * Thread-safety: set_error and last_error may be called from any thread; each
 * thread has its own pending message. */
#ifndef ACCEL_ABI_STATUS_H_
#define ACCEL_ABI_STATUS_H_

#include "accel/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* -------------------------------- Status --------------------------------- */

/* Values are fixed forever; minors may append new codes. A reader that sees a
 * code it does not know treats it as ACCEL_ERROR_UNKNOWN. */
typedef enum AccelStatus {
  ACCEL_OK = 0,
  ACCEL_ERROR_UNKNOWN = 1,              /* anything not covered below */
  ACCEL_ERROR_INVALID_ARGUMENT = 2,     /* bad value, shape, dtype, option */
  ACCEL_ERROR_NOT_FOUND = 3,            /* no such option, tensor, unit, name */
  ACCEL_ERROR_ALREADY_EXISTS = 4,       /* duplicate name or registration */
  ACCEL_ERROR_UNSUPPORTED = 5,          /* valid request this side cannot do */
  ACCEL_ERROR_FAILED_PRECONDITION = 6,  /* called in the wrong phase/order */
  ACCEL_ERROR_OUT_OF_MEMORY = 7,        /* an allocation failed */
  ACCEL_ERROR_TIMEOUT = 8,              /* an operation exceeded its deadline */
  ACCEL_ERROR_ABORTED = 9,              /* another rank failed; the run ends */
  ACCEL_ERROR_INTERNAL = 10,            /* a bug: broken invariant */
  ACCEL_ERROR_IO = 11,                  /* file system or network I/O failed */
  ACCEL_ERROR_DATA_LOSS = 12,           /* corrupt or truncated data */
  ACCEL_ERROR_VERSION_MISMATCH = 13,    /* ABI or format version not accepted */
  ACCEL_STATUS_FORCE_32BIT = 0x7fffffff /* keeps the enum 32 bits wide */
} AccelStatus;

/* A constant, static name for `status` ("ACCEL_ERROR_TIMEOUT"); never NULL.
 * (A table, not a switch, so -Wswitch-enum in plugin builds stays quiet.) */
static inline const char* accel_status_name(AccelStatus status) {
  static const char* const names[] = {
      "ACCEL_OK",
      "ACCEL_ERROR_UNKNOWN",
      "ACCEL_ERROR_INVALID_ARGUMENT",
      "ACCEL_ERROR_NOT_FOUND",
      "ACCEL_ERROR_ALREADY_EXISTS",
      "ACCEL_ERROR_UNSUPPORTED",
      "ACCEL_ERROR_FAILED_PRECONDITION",
      "ACCEL_ERROR_OUT_OF_MEMORY",
      "ACCEL_ERROR_TIMEOUT",
      "ACCEL_ERROR_ABORTED",
      "ACCEL_ERROR_INTERNAL",
      "ACCEL_ERROR_IO",
      "ACCEL_ERROR_DATA_LOSS",
      "ACCEL_ERROR_VERSION_MISMATCH",
  };
  size_t index = (size_t)(uint32_t)status;
  return index < sizeof(names) / sizeof(names[0]) ? names[index]
                                                   : "ACCEL_ERROR_UNKNOWN";
}

/* ---------------------------- Error services ----------------------------- */

/* Records the failure the calling plugin is about to return.
 * `status`: the non-OK code the plugin will return (ACCEL_OK is ignored).
 * `message`: NUL-terminated UTF-8, borrowed for the duration of the call
 *   only (the host copies it); NULL means "no message". Need not include the
 *   plugin's name: the host adds it.
 * When: any time after the entry call received the services table.
 * Thread: any; the message is pending on the calling thread. */
typedef void AccelSetErrorFn(AccelHost* host, AccelStatus status,
                             const char* message);

/* Returns the message of the last service call that failed on this thread,
 * or "" when none failed. Host-owned: valid until this plugin's next service
 * call on the same thread (copy it to keep it). Never NULL.
 * Thread: any; each thread sees its own last failure. */
typedef const char* AccelLastErrorFn(AccelHost* host);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ACCEL_ABI_STATUS_H_ */
