/* accel/memory.h — memory (accounted allocation, copies) and stream ordering.
 *
 * Defines: AccelStream, AccelEvent, AccelBuffer, the memory categories and
 * places, and AccelMemoryServices.
 *
 * Every byte a plugin needs on the device or in pinned host memory comes from
 * `allocate`, tagged with a category, so the host can report per-rank memory by
 * category and tests can compare it with a strategy's theory. Who allocates a
 * buffer frees it: a plugin frees what it allocated (at the latest in its
 * teardown hook); the host frees what it allocated.
 *
 * Ordering is explicit. Device work (kernels, copies, collectives) is enqueued
 * on an AccelStream and is ordered only with other work on that stream;
 * events order work across streams. On a CPU-only run (no GPU) all work runs
 * synchronously, streams and events are tokens, and every wait returns at
 * once — code written for streams is correct on both.
 *
 * Thread-safety: allocate, deallocate, copy and the stream/event functions
 * may be called from any thread (the host serialises internally); stats are
 * per-rank totals read atomically. */
#ifndef ACCEL_ABI_MEMORY_H_
#define ACCEL_ABI_MEMORY_H_

#include "accel/status.h"
#include "accel/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------ Handles ---------------------------------- */

/* A device work queue. On CUDA devices its value is a cudaStream_t (cast it
 * to launch your own kernels). NULL in an argument means "the rank's compute
 * stream" (never CUDA's legacy default stream). Owned by its creator. */
typedef struct AccelStreamOpaque* AccelStream;

/* A marker recorded on a stream, to order work across streams. Opaque;
 * created and destroyed through the services below. */
typedef struct AccelEvent AccelEvent;

/* One accounted allocation. Opaque; owns the memory its view describes. */
typedef struct AccelBuffer AccelBuffer;

/* The streams the host owns for each rank. */
typedef enum AccelStreamRole {
  ACCEL_STREAM_COMPUTE = 0,   /* forward/backward/optimizer kernels */
  ACCEL_STREAM_COMM = 1,      /* collectives issued asynchronously */
  ACCEL_STREAM_COPY_IN = 2,   /* host -> device copies (offload, prefetch) */
  ACCEL_STREAM_COPY_OUT = 3,  /* device -> host copies (offload, checkpoint) */
  ACCEL_STREAM_ROLE_FORCE_32BIT = 0x7fffffff
} AccelStreamRole;

/* What an allocation is for; the host keeps current and peak bytes per
 * category and place. */
typedef enum AccelMemoryCategory {
  ACCEL_MEMORY_ALL = 0,          /* stats only: the sum of all categories */
  ACCEL_MEMORY_PARAMS = 1,       /* parameters, shards, master weights */
  ACCEL_MEMORY_GRADS = 2,        /* gradients, gradient shards */
  ACCEL_MEMORY_OPTIMIZER = 3,    /* optimizer state (moments, momentum) */
  ACCEL_MEMORY_ACTIVATIONS = 4,  /* activations and their gradients */
  ACCEL_MEMORY_COMM = 5,         /* buckets, gather/scatter staging */
  ACCEL_MEMORY_WORKSPACE = 6,    /* short-lived scratch (casts, GEMM) */
  ACCEL_MEMORY_OTHER = 7,        /* plugin state: FP8 scales, histories */
  ACCEL_MEMORY_CATEGORY_FORCE_32BIT = 0x7fffffff
} AccelMemoryCategory;

/* Where an allocation lives. */
typedef enum AccelMemoryPlace {
  ACCEL_MEMORY_DEVICE = 0,       /* the rank's device (host on CPU runs) */
  ACCEL_MEMORY_HOST = 1,         /* pageable host memory */
  ACCEL_MEMORY_HOST_PINNED = 2,  /* page-locked host memory, async copies */
  ACCEL_MEMORY_PLACE_FORCE_32BIT = 0x7fffffff
} AccelMemoryPlace;

/* ------------------------------- Alloc ----------------------------------- */

/* Flags of AccelAllocateArgs.flags. */
#define ACCEL_ALLOCATE_ZERO_FILL (UINT32_C(1) << 0)  /* zeroed on `stream` */

typedef struct AccelAllocateArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  AccelMemoryPlace place;
  AccelMemoryCategory category;      /* not ACCEL_MEMORY_ALL */
  DLDataType dtype;
  int32_t ndim;                      /* >= 0 */
  const int64_t* shape;              /* ndim entries; borrowed for the call */
  uint32_t flags;                    /* ACCEL_ALLOCATE_* */
  uint32_t alignment;                /* bytes, power of two; 0 = 256 */
  AccelStream stream;                /* the memory is usable on this stream */
  const char* label;                 /* for memory reports; copied; NULL ok */
  AccelBuffer* buffer;               /* out: pass to deallocate */
  const DLTensor* tensor;            /* out: compact row-major view of the whole
                                        buffer; owned by the buffer, valid until
                                        it is freed */
} AccelAllocateArgs;

/* Allocates an accounted buffer. Contents are undefined unless
 * ACCEL_ALLOCATE_ZERO_FILL. A plugin may make its own DLTensor views into the
 * buffer (sub-ranges, reshapes) that must not outlive it.
 * Errors: ACCEL_ERROR_OUT_OF_MEMORY (the message gives bytes requested and
 * the rank's usage by category), ACCEL_ERROR_INVALID_ARGUMENT.
 * When: from the `create` hook until teardown. Thread: any. */
typedef AccelStatus AccelMemoryAllocateFn(AccelHost* host,
                                          AccelAllocateArgs* args);

/* Frees `buffer` (NULL is a no-op) once the work already enqueued on
 * `stream` is done; the memory may be reused by work enqueued on any stream
 * after that point. Every view of the buffer is invalid after the call.
 * Only a buffer's owner frees it: whoever allocated it, unless a field
 * passed ownership on (accel/plugin.h says where). Thread: any. */
typedef AccelStatus AccelMemoryDeallocateFn(AccelHost* host,
                                            AccelBuffer* buffer,
                                            AccelStream stream);

/* -------------------------------- Copy ----------------------------------- */

typedef struct AccelCopyArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  const DLTensor* src;   /* borrowed; any place, any strides */
  const DLTensor* dst;   /* borrowed; same dtype and shape as src */
  AccelStream stream;    /* enqueued here; pageable host memory copies
                            synchronously */
  uint32_t flags;        /* since 1.15: ACCEL_COPY_* bits */
  uint32_t reserved;     /* since 1.15: must be 0 (refused otherwise) */
} AccelCopyArgs;

/* Flags of AccelCopyArgs.flags (since 1.15; a 1.14 host, or args whose
 * struct_size ends before `flags`, reads none set; bits a host does not
 * know are ignored).
 *
 * ACCEL_COPY_DEFERRED_READ: the caller reads a host `dst` only after the
 * host has next synchronised the compute stream: in its step_end hook
 * (which follows the host's one read of the step, accel/plugin.h, since
 * 1.14) or after its own stream_synchronize. A copy from device memory into
 * pinned host memory may then return as soon as it is queued on the
 * compute stream, instead of holding the calling thread until its bytes
 * land (what every copy does without the flag, and what plugins before
 * 1.15 rely on). Other copies are unchanged. */
#define ACCEL_COPY_DEFERRED_READ 1u

/* Copies src into dst across places (device, host, pinned) and strides.
 * Both tensors' memory must stay valid until the copy completes on stream.
 * Returns with the copy complete unless flags say otherwise (above).
 * Thread: any. */
typedef AccelStatus AccelMemoryCopyFn(AccelHost* host,
                                      const AccelCopyArgs* args);

/* ------------------------------ Accounting ------------------------------- */

typedef struct AccelMemoryStats {
  size_t struct_size;
  AccelExtensionBase* extensions;
  int64_t current_bytes;   /* out: bytes allocated now */
  int64_t peak_bytes;      /* out: the maximum since the last reset_peak */
  int64_t num_allocs;      /* out: live allocations */
} AccelMemoryStats;

/* Fills *stats (caller-owned; the caller sets struct_size) with this rank's
 * totals for `category` in `place` — the host's own allocations and every
 * plugin's. Thread: any. */
typedef AccelStatus AccelMemoryStatsFn(AccelHost* host, AccelMemoryPlace place,
                                       AccelMemoryCategory category,
                                       AccelMemoryStats* stats);

/* Resets every peak of this rank to its current value (the profiler calls it
 * at step begin to measure per-step peaks). Thread: the loop thread. */
typedef AccelStatus AccelMemoryResetPeakFn(AccelHost* host);

/* ---------------------------- Streams, events ---------------------------- */

/* Sets *stream (out) to the host's stream for `role`; host-owned, valid until
 * teardown; never destroy it. Thread: any. */
typedef AccelStatus AccelStreamGetFn(AccelHost* host, AccelStreamRole role,
                                     AccelStream* stream);

/* Creates a stream owned by the plugin into *stream (out); destroy it with
 * stream_destroy before teardown returns. `priority`: 0 normal, < 0 higher
 * (mapped to the device's range). Thread: any. */
typedef AccelStatus AccelStreamCreateFn(AccelHost* host, int32_t priority,
                                        AccelStream* stream);

/* Destroys a stream from stream_create, after its pending work. */
typedef AccelStatus AccelStreamDestroyFn(AccelHost* host, AccelStream stream);

/* Blocks the calling thread until all work on `stream` is done. */
typedef AccelStatus AccelStreamSynchronizeFn(AccelHost* host,
                                             AccelStream stream);

/* Creates an event into *event (out); owned by the caller. */
typedef AccelStatus AccelEventCreateFn(AccelHost* host, AccelEvent** event);

/* Destroys `event` (NULL is a no-op) once it completed. */
typedef AccelStatus AccelEventDestroyFn(AccelHost* host, AccelEvent* event);

/* Records `event` at the current end of `stream`. */
typedef AccelStatus AccelEventRecordFn(AccelHost* host, AccelEvent* event,
                                       AccelStream stream);

/* Makes work enqueued on `stream` after this call wait for `event`; does not
 * block the calling thread. */
typedef AccelStatus AccelStreamWaitEventFn(AccelHost* host, AccelStream stream,
                                           AccelEvent* event);

/* Sets *done (out) to whether `event` completed; never blocks. */
typedef AccelStatus AccelEventQueryFn(AccelHost* host, AccelEvent* event,
                                      bool* done);

/* Blocks the calling thread until `event` completed. */
typedef AccelStatus AccelEventSynchronizeFn(AccelHost* host,
                                            AccelEvent* event);

/* Sets *elapsed_ms (out) to the device time between two completed events
 * (both recorded on the same device). For the profiler. */
typedef AccelStatus AccelEventElapsedFn(AccelHost* host,
                                        const AccelEvent* start,
                                        const AccelEvent* end,
                                        double* elapsed_ms);

/* The memory area of the services table. */
typedef struct AccelMemoryServices {
  size_t struct_size;
  AccelExtensionBase* extensions;
  AccelMemoryAllocateFn* allocate;
  /* Not named `free`: a malloc-debugging macro would rewrite the call. */
  AccelMemoryDeallocateFn* deallocate;
  AccelMemoryCopyFn* copy;
  AccelMemoryStatsFn* stats;
  AccelMemoryResetPeakFn* reset_peak;
  AccelStreamGetFn* stream_get;
  AccelStreamCreateFn* stream_create;
  AccelStreamDestroyFn* stream_destroy;
  AccelStreamSynchronizeFn* stream_synchronize;
  AccelEventCreateFn* event_create;
  AccelEventDestroyFn* event_destroy;
  AccelEventRecordFn* event_record;
  AccelStreamWaitEventFn* stream_wait_event;
  AccelEventQueryFn* event_query;
  AccelEventSynchronizeFn* event_synchronize;
  AccelEventElapsedFn* event_elapsed;
} AccelMemoryServices;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ACCEL_ABI_MEMORY_H_ */
