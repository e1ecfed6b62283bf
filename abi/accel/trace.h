/* accel/trace.h — trace events and per-step metrics.
 *
 * Defines: AccelTraceEvent (what observers receive), AccelMetricReduce and
 * AccelTraceServices (begin/end/instant/counter, metric recording).
 *
 * Producers: the host (steps, units' forward/backward, the loss, clipping
 * and the optimizer, every plugin hook under the plugin's name, collectives
 * with bytes, sequence number and group ranks, allocations, checkpoint
 * phases; LibTorch operators and device kernels on request, see set_detail)
 * and every plugin,
 * through the services below.
 * Consumers: plugins that capture (the profiler) through their trace_event
 * hook, and the host's metric log.
 * When no consumer is active an emit costs one branch; `enabled` lets a
 * producer skip building names.
 *
 * Strings passed to these functions are borrowed for the call; the host
 * copies what it keeps. Emitting never fails and never blocks on I/O.
 *
 * Thread-safety: every function here may be called from any thread. Ranges
 * (begin/end) nest LIFO per thread, or per stream for device ranges. */
#ifndef ACCEL_ABI_TRACE_H_
#define ACCEL_ABI_TRACE_H_

#include "accel/memory.h"
#include "accel/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* -------------------------------- Events --------------------------------- */

typedef enum AccelTraceEventType {
  ACCEL_TRACE_BEGIN = 0,    /* a range opens */
  ACCEL_TRACE_END = 1,      /* the innermost open range closes */
  ACCEL_TRACE_INSTANT = 2,  /* a point in time */
  ACCEL_TRACE_COUNTER = 3,  /* a named value at a point in time */
  ACCEL_TRACE_EVENT_TYPE_FORCE_32BIT = 0x7fffffff
} AccelTraceEventType;

/* One event as delivered to an observer's trace_event hook. Filled by the
 * host; borrowed by the hook for the duration of the call (copy what you
 * keep). */
typedef struct AccelTraceEvent {
  size_t struct_size;
  AccelExtensionBase* extensions;
  AccelTraceEventType type;
  int32_t rank;              /* the emitting rank (always this rank) */
  const char* name;          /* "forward", "all_gather" */
  const char* category;      /* "host", "comm", "memory", or a plugin name */
  const char* source;        /* the emitter: "host" or the plugin's name */
  int64_t timestamp_ns;      /* CLOCK_MONOTONIC of this process; device
                                ranges are mapped onto the same clock */
  int64_t step;              /* training step, -1 outside the loop */
  int32_t unit;              /* the unit concerned, -1 if none */
  int32_t micro_batch;       /* the micro-batch, -1 if none */
  double value;              /* COUNTER: the value; else 0 */
  uint64_t thread_id;        /* emitting thread (host numbering) */
  AccelStream stream;        /* device range: its stream; else NULL */
  int64_t bytes;             /* comm/memory events: bytes moved or held;
                                else 0 */
  const char* detail;        /* "key=value; ..." for the trace viewer's args
                                (shapes, dtypes, peers); NULL if none */
} AccelTraceEvent;

/* --------------------------------- Emit ---------------------------------- */

/* Returns whether any consumer wants events of `category` now (the profiler
 * may capture only some steps). Cheap; call it before building a name. */
typedef bool AccelTraceEnabledFn(AccelHost* host, const char* category);

/* Opens a range named `name`. `stream` NULL: a host-time range on this
 * thread. `stream` set: a device range timed by events recorded on that
 * stream; it is delivered once the device reached its end (at the latest at
 * step end). */
typedef void AccelTraceBeginFn(AccelHost* host, const char* name,
                               const char* category, AccelStream stream);

/* Closes the innermost range opened with the same `stream` (or on this
 * thread). `name` must match the begin's (checked in debug builds). */
typedef void AccelTraceEndFn(AccelHost* host, const char* name,
                             const char* category, AccelStream stream);

/* Records a point event. */
typedef void AccelTraceInstantFn(AccelHost* host, const char* name,
                                 const char* category);

/* Records the value of a counter (a queue depth, bytes in flight, a loss
 * scale). */
typedef void AccelTraceCounterFn(AccelHost* host, const char* name,
                                 const char* category, double value);

/* -------------------------------- Metrics -------------------------------- */

/* How repeated records of one metric within a step combine. */
typedef enum AccelMetricReduce {
  ACCEL_METRIC_LAST = 0,
  ACCEL_METRIC_SUM = 1,
  ACCEL_METRIC_MEAN = 2,
  ACCEL_METRIC_MAX = 3,
  ACCEL_METRIC_MIN = 4,
  ACCEL_METRIC_REDUCE_FORCE_32BIT = 0x7fffffff
} AccelMetricReduce;

/* Records `value` for metric `name` ("amax_max", "buckets": the plugin's
 * own name, without a prefix) in the current step. The host combines the
 * records of a step with `reduce` (the first record's reduce wins) and, at
 * step end, rank 0 writes one value per metric into its JSON line of the
 * metrics log (--metrics-file) under the key "<plugin>.<name>" (ddp's
 * "buckets" becomes "ddp.buckets"). Only rank 0's records are written: a
 * value that differs by rank must be reduced by the plugin first. Also
 * delivered to observers as a COUNTER event (source: the plugin, name:
 * `name`). */
typedef void AccelMetricRecordFn(AccelHost* host, const char* name,
                                 double value, AccelMetricReduce reduce);

/* ------------------------------- Consumers ------------------------------- */

/* Turns delivery of every event to the calling plugin's trace_event hook on
 * or off (off initially; the host turns it off before teardown). Off returns
 * once no trace_event call to this plugin runs on another thread, and none
 * starts after. Thread: loop thread, also inside the plugin's trace_event. */
typedef AccelStatus AccelTraceSetCaptureFn(AccelHost* host, bool capture);

/* ABI 1.2. What the host records beyond its own ranges while the calling
 * plugin captures, a bit set of ACCEL_TRACE_DETAIL_* (0 initially; unknown
 * bits are ignored). OPERATORS: every LibTorch operator the host runs becomes
 * a range of category "operator" (named "aten::addmm", nested inside the
 * host's ranges), taken with LibTorch's profiler callbacks (RecordFunction);
 * SHAPES adds each operator's input shapes and dtypes to the event's detail
 * ("shapes=[4, 64, 128], [384, 128]; dtypes=float, float"). Costs nothing
 * while no plugin asks for it or capture is off. Thread: loop thread. */
#define ACCEL_TRACE_DETAIL_OPERATORS (UINT32_C(1) << 0)
#define ACCEL_TRACE_DETAIL_SHAPES (UINT32_C(1) << 1)
/* ABI 1.3. KERNELS: on a CUDA rank, the device's kernels, copies and sets as
 * LibTorch's Kineto profiler (CUPTI) records them, each a BEGIN/END pair of
 * category "kernel" (named as CUPTI names the kernel) on a device track:
 * `stream` is a host-owned handle standing for the CUDA stream, to be used
 * as a track identity only (services refuse it), the detail says
 * "device=0; stream=7; correlation=123". The device reports them after the
 * fact, so they are delivered when the recording plugin's capture or detail
 * next changes, timestamped on the CLOCK_MONOTONIC of the rank and stamped
 * with the step their start falls in. On a CPU rank the bit asks nothing.
 * Hosts of ABI 1.2 ignore it (unknown bits). */
#define ACCEL_TRACE_DETAIL_KERNELS (UINT32_C(1) << 2)
typedef AccelStatus AccelTraceSetDetailFn(AccelHost* host, uint32_t detail);

/* The trace and metrics area of the services table. */
typedef struct AccelTraceServices {
  size_t struct_size;
  AccelExtensionBase* extensions;
  AccelTraceEnabledFn* enabled;
  AccelTraceBeginFn* begin;
  AccelTraceEndFn* end;
  AccelTraceInstantFn* instant;
  AccelTraceCounterFn* counter;
  AccelMetricRecordFn* metric;
  AccelTraceSetCaptureFn* set_capture;
  AccelTraceSetDetailFn* set_detail; /* 1.2 */
} AccelTraceServices;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ACCEL_ABI_TRACE_H_ */
