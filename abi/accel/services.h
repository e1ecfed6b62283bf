/* accel/services.h — the services table: all a plugin gets from the host.
 *
 * Defines: AccelIdentity, AccelLogLevel, the core services (errors, logging,
 * identity) and AccelHostServices, which aggregates the areas declared in
 * options.h, comm.h, memory.h, kernels.h, model.h, trace.h, checkpoint.h and
 * (since 1.8) gather_codec.h and precision.h.
 *
 * A plugin reaches the host through this table only. The host passes it to
 * the entry call (accel/plugin.h) and it stays valid, unchanged, until the
 * plugin's teardown hook returned. Every function takes the plugin's
 * AccelHost* as its first argument.
 *
 * Growth: each area is its own table with its own struct_size, so areas grow
 * independently. A NULL area pointer means the host offers none of it; a NULL
 * function pointer means that function is not supported by this host (use
 * ACCEL_HAS_FN). A v1.0 host offers every area and function declared in
 * 1.0, except in an info-only load (ACCEL_HOST_INFO_ONLY: --list-plugins,
 * --help, checks), where only the core below is guaranteed.
 *
 * Logging: a plugin writes nothing to stdout/stderr itself, and never logs
 * before the entry call handed it this table — there is no log function
 * before that, by construction.
 *
 * Thread-safety: stated per function in each area; the core below may be
 * called from any thread. */
#ifndef ACCEL_ABI_SERVICES_H_
#define ACCEL_ABI_SERVICES_H_

#include "accel/checkpoint.h"
#include "accel/gather_codec.h"
#include "accel/comm.h"
#include "accel/kernels.h"
#include "accel/memory.h"
#include "accel/model.h"
#include "accel/options.h"
#include "accel/precision.h"
#include "accel/status.h"
#include "accel/tensor.h"
#include "accel/trace.h"
#include "accel/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------- Identity -------------------------------- */

/* Where this process sits in the job. Fixed for the whole run. */
typedef struct AccelIdentity {
  size_t struct_size;
  AccelExtensionBase* extensions;
  int32_t rank;              /* 0..world_size-1 */
  int32_t world_size;
  int32_t local_rank;        /* index among the ranks of this node */
  int32_t local_world_size;  /* ranks on this node */
  int32_t node_rank;         /* 0..num_nodes-1 */
  int32_t num_nodes;
  DLDevice device;           /* this rank's device; kDLCPU on CPU-only runs */
} AccelIdentity;

/* Sets *identity (out) to a host-owned struct valid until teardown.
 * When: from the entry call on (in info-only loads: rank 0 of 1).
 * Thread: any. */
typedef AccelStatus AccelGetIdentityFn(AccelHost* host,
                                       const AccelIdentity** identity);

/* -------------------------------- Logging -------------------------------- */

typedef enum AccelLogLevel {
  ACCEL_LOG_TRACE = 0,
  ACCEL_LOG_DEBUG = 1,
  ACCEL_LOG_INFO = 2,
  ACCEL_LOG_WARN = 3,
  ACCEL_LOG_ERROR = 4,  /* also report the failure through set_error */
  ACCEL_LOG_LEVEL_FORCE_32BIT = 0x7fffffff
} AccelLogLevel;

/* Writes one line. `message`: NUL-terminated UTF-8 without trailing newline,
 * borrowed for the call. The host adds time, rank and the plugin's name, and
 * drops lines below the run's level. Never fails, never blocks on a full
 * disk. When: from the entry call on. Thread: any. */
typedef void AccelLogFn(AccelHost* host, AccelLogLevel level,
                        const char* message);

/* Returns whether `level` would be written (skip formatting if not). */
typedef bool AccelLogEnabledFn(AccelHost* host, AccelLogLevel level);

/* ------------------------------ The table -------------------------------- */

typedef struct AccelHostServices {
  size_t struct_size;
  AccelExtensionBase* extensions;
  /* Core: never NULL. */
  AccelSetErrorFn* set_error;             /* accel/status.h */
  AccelLastErrorFn* last_error;           /* accel/status.h */
  AccelLogFn* log;
  AccelLogEnabledFn* log_enabled;
  AccelGetIdentityFn* get_identity;
  /* Areas: host-owned tables, valid as long as this one; NULL = absent. */
  const AccelOptionServices* options;     /* accel/options.h */
  const AccelCommServices* comm;          /* accel/comm.h */
  const AccelMemoryServices* memory;      /* accel/memory.h */
  const AccelKernelServices* kernels;     /* accel/kernels.h */
  const AccelModelServices* model;        /* accel/model.h */
  const AccelTraceServices* trace;        /* accel/trace.h */
  const AccelCheckpointServices* checkpoint; /* accel/checkpoint.h */
  /* since 1.8: a precision plugin's parameter gather codec, for sharding
   * plugins (accel/gather_codec.h); read with ACCEL_STRUCT_HAS_FIELD. */
  const AccelGatherCodecServices* gather_codec;
  /* 1.8: read with ACCEL_STRUCT_HAS_FIELD (a 1.7 host's table ends above). */
  const AccelPrecisionServices* precision;   /* accel/precision.h */
} AccelHostServices;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ACCEL_ABI_SERVICES_H_ */
