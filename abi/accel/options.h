/* accel/options.h — a plugin's option schema, and typed option lookup.
 *
 * Defines: AccelOptionType, AccelOptionSpec (what a plugin declares in its
 * descriptor) and AccelOptionServices (how it reads the parsed values).
 *
 * The host turns each declared option NAME of plugin P into the flag
 * `--P.NAME=VALUE`, the key `NAME = VALUE` in the `[P]` section of --config,
 * and a line of `accel-host --help --plugin P`. The host parses and validates
 * every value against the spec (type, allowed values, bounds) before any
 * plugin code beyond the entry call runs; an unknown or ill-typed option is a
 * one-line error naming the flag. Plugins never parse command lines.
 *
 * Thread-safety: option values are immutable once parsed; every lookup may be
 * called from any thread. */
#ifndef ACCEL_ABI_OPTIONS_H_
#define ACCEL_ABI_OPTIONS_H_

#include "accel/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* -------------------------------- Schema --------------------------------- */

/* The type of an option; also selects which lookup function reads it. */
typedef enum AccelOptionType {
  ACCEL_OPTION_BOOL = 1,    /* true/false, 1/0, yes/no, on/off */
  ACCEL_OPTION_INT = 2,     /* int64 decimal */
  ACCEL_OPTION_DOUBLE = 3,  /* C locale floating point */
  ACCEL_OPTION_STRING = 4,  /* free text; lists are comma-separated */
  ACCEL_OPTION_ENUM = 5,    /* one of allowed_values, case-sensitive */
  ACCEL_OPTION_TYPE_FORCE_32BIT = 0x7fffffff
} AccelOptionType;

/* Flags of AccelOptionSpec.flags (a bit set; unknown bits are ignored). */
#define ACCEL_OPTION_FLAG_REQUIRED (UINT32_C(1) << 0)   /* no default */
#define ACCEL_OPTION_FLAG_DEPRECATED (UINT32_C(1) << 1) /* warn when set */
/* May differ between ranks (a per-rank log path, per-rank diagnostics): left
 * out of the host's start-up check that every rank runs the same settings.
 * Every other option must be equal on every rank (docs/kwargs.md). */
#define ACCEL_OPTION_FLAG_PER_RANK (UINT32_C(1) << 2)

/* One option. Filled by the plugin, usually as static const data; must stay
 * valid and unchanged from the entry call until the plugin is unloaded. The
 * host validates the whole schema at load time and refuses the plugin, with
 * one line naming the option, if it is malformed. */
typedef struct AccelOptionSpec {
  size_t struct_size;
  AccelExtensionBase* extensions;
  /* [a-z][a-z0-9_]*, unique within the plugin. */
  const char* name;
  AccelOptionType type;
  uint32_t flags;                       /* ACCEL_OPTION_FLAG_* */
  /* Default in text form, parsed like a user value. NULL: no default (only
   * with ACCEL_OPTION_FLAG_REQUIRED, or a STRING that is "unset"). */
  const char* default_value;
  /* One line for --help; for a deprecated option, says what replaces it. */
  const char* help;
  /* ENUM: the accepted spellings, num_allowed_values >= 1 of them. STRING:
   * optional whitelist (NULL = any text). Others: NULL and 0. */
  const char* const* allowed_values;
  size_t num_allowed_values;
  /* INT/DOUBLE: inclusive bounds in text form, NULL = unbounded. */
  const char* min_value;
  const char* max_value;
} AccelOptionSpec;

/* -------------------------------- Lookup --------------------------------- */

/* Every lookup takes `name`, NUL-terminated, borrowed for the call:
 *  - "NAME": an option of the calling plugin's own schema;
 *  - "SECTION.NAME": another section, read-only — the host's own sections
 *    (e.g. "train.max_grad_norm", "train.grad_accum_steps"; the list is in
 *    docs/abi.md) or another loaded plugin's options ("fsdp.cpu_offload").
 * Errors: ACCEL_ERROR_NOT_FOUND (no such option, or the plugin is not
 * loaded), ACCEL_ERROR_INVALID_ARGUMENT (the option has another type).
 * An option the user did not give reads as its default.
 * When: from the `create` hook on (not during the entry call: options are
 * parsed after every plugin's schema is known). Thread: any. */

/* Reads a BOOL option into *value (out). */
typedef AccelStatus AccelOptionGetBoolFn(AccelHost* host, const char* name,
                                         bool* value);

/* Reads an INT option into *value (out). */
typedef AccelStatus AccelOptionGetIntFn(AccelHost* host, const char* name,
                                        int64_t* value);

/* Reads a DOUBLE option (or an INT one, converted) into *value (out). */
typedef AccelStatus AccelOptionGetDoubleFn(AccelHost* host, const char* name,
                                           double* value);

/* Reads a STRING or ENUM option's text into *value (out): host-owned,
 * NUL-terminated, valid until the plugin's teardown returned. NULL when a
 * STRING option without default was not given. */
typedef AccelStatus AccelOptionGetStringFn(AccelHost* host, const char* name,
                                           const char** value);

/* Reads an ENUM option as the index of its value in the spec's
 * allowed_values into *index (out). */
typedef AccelStatus AccelOptionGetEnumFn(AccelHost* host, const char* name,
                                         int32_t* index);

/* Sets *is_set (out) to true when the user gave the option (flag or config),
 * false when it holds its default. For options whose meaning changes when
 * another is given (a deprecated alias and its replacement). */
typedef AccelStatus AccelOptionIsSetFn(AccelHost* host, const char* name,
                                       bool* is_set);

/* The option area of the services table. */
typedef struct AccelOptionServices {
  size_t struct_size;
  AccelExtensionBase* extensions;
  AccelOptionGetBoolFn* get_bool;
  AccelOptionGetIntFn* get_int;
  AccelOptionGetDoubleFn* get_double;
  AccelOptionGetStringFn* get_string;
  AccelOptionGetEnumFn* get_enum;
  AccelOptionIsSetFn* is_set;
} AccelOptionServices;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ACCEL_ABI_OPTIONS_H_ */
