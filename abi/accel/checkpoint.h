/* accel/checkpoint.h — putting and getting tensor slices by global offset.
 *
 * Defines: AccelCheckpointSpace, AccelCheckpointSliceArgs,
 * AccelCheckpointTensorInfo and AccelCheckpointServices.
 *
 * A checkpoint stores every tensor by name with its GLOBAL shape, as a set of
 * rectangular slices (global offset + local shape) that together tile it
 * exactly. Which rank or strategy wrote a slice does not matter: `get` reads
 * any rectangle of a tensor, assembling it from whichever saved slices
 * overlap it, so any strategy at any world size resumes any other's
 * checkpoint. Names are strategy-neutral (the parameter's name; the
 * optimizer state's standard name), never "rank 3's flat shard".
 *
 * Who saves what: the host saves what it owns (parameters of units whose
 * storage it manages, optimizer state when no plugin took over the optimizer
 * step, the trainer state); each plugin saves what it owns, from its
 * save_state hook. Each element is put by exactly one rank: replicated data
 * is put by the replica whose data index is 0. The host checks at commit that
 * the slices of each tensor tile its global shape, without gap or overlap,
 * and fails the save naming the tensor otherwise. Files, manifest, fsync and
 * atomic rename are the host's (docs/checkpoint_format.md).
 *
 * A flat shard that cuts a tensor mid-row is put as up to three rectangles
 * per cut dimension (the partial leading row, the whole rows, the partial
 * trailing row); the SDK's C++ layer has a helper for it.
 *
 * Thread-safety: loop thread only, inside the save_state / load_state hooks
 * (put/put_string only in save_state; get/info/get_string only in
 * load_state). */
#ifndef ACCEL_ABI_CHECKPOINT_H_
#define ACCEL_ABI_CHECKPOINT_H_

#include "accel/memory.h"
#include "accel/status.h"
#include "accel/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --------------------------------- Names --------------------------------- */

/* The namespace a name lives in; the host prefixes it in the index. */
typedef enum AccelCheckpointSpace {
  /* Parameters; name = the parameter's name (accel/model.h). */
  ACCEL_CHECKPOINT_MODEL = 0,
  /* Optimizer state; name = "STATE/PARAM" with STATE one of the standard
   * names exp_avg, exp_avg_sq (AdamW), momentum_buffer (SGD), and the same
   * global shape as the parameter; the step count is the host's. */
  ACCEL_CHECKPOINT_OPTIMIZER = 1,
  /* The calling plugin's own state ("amax_history"); the host prefixes the
   * plugin's name, so plugins cannot collide. */
  ACCEL_CHECKPOINT_PLUGIN = 2,
  /* Since 1.6. The checkpoint's consolidated model file,
   * "model_16bit.safetensors" in the checkpoint directory (DeepSpeed's
   * stage3_gather_16bit_weights_on_model_save): whole parameters in a
   * compact dtype for use outside a resume (inference, export), written by
   * world rank 0 as part of the same atomic save. name = the parameter's
   * name; each put is one whole tensor (global_offset all zero, local's
   * shape = global_shape), from world rank 0 only, once per name; the dtype
   * is local's. Never read back: get/info report ACCEL_ERROR_NOT_FOUND;
   * put_string refuses the space. A 1.5 host refuses it (INVALID_ARGUMENT:
   * unknown space). */
  ACCEL_CHECKPOINT_EXPORT = 3,
  ACCEL_CHECKPOINT_SPACE_FORCE_32BIT = 0x7fffffff
} AccelCheckpointSpace;

/* --------------------------------- Slices -------------------------------- */

typedef struct AccelCheckpointSliceArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  AccelCheckpointSpace space;
  int32_t ndim;                  /* of the global tensor = of local */
  const char* name;              /* UTF-8, no NUL inside; borrowed */
  const int64_t* global_shape;   /* ndim entries; borrowed */
  const int64_t* global_offset;  /* ndim entries: where local[0,...,0] sits
                                    in the global tensor; borrowed */
  const DLTensor* local;         /* the slice; its shape is the extent.
                                    put: read; get: out (filled) */
  AccelStream stream;            /* device `local`: ordering of the copy */
  uint32_t flags;                /* since 1.13: ACCEL_CHECKPOINT_PUT_* bits
                                    (put only; get ignores them) */
  uint32_t reserved;             /* since 1.13: must be 0 (refused otherwise) */
} AccelCheckpointSliceArgs;

/* Flags of AccelCheckpointSliceArgs.flags (since 1.13; a 1.12 host, or a
 * put whose struct_size ends before `flags`, reads none set; bits a host
 * does not know are ignored).
 *
 * ACCEL_CHECKPOINT_PUT_STABLE: the caller promises more than the default
 * lifetime: `local` stays allocated and unchanged until the calling
 * plugin's next optimizer_step, train_step, save_state, load_state or
 * teardown hook begins, whichever comes first (a sharding strategy's master
 * weights and moments, which only its optimizer step writes). The host may
 * then read a host-memory `local` after save_state returns: a blocking save
 * writes it to disk from the caller's memory with no copy, and a background
 * save (--save-async, --snapshot-every) copies it on its writer thread
 * while the next step's forward and backward run, holding the step's
 * optimizer phase until that copy is done (CheckFreq's pipelined
 * snapshot). A device `local` is copied before put returns, as without the
 * flag. */
#define ACCEL_CHECKPOINT_PUT_STABLE 1u

/* Adds a slice to the checkpoint being saved. The host reads `local` after
 * the work already enqueued on `stream`, at any time until the save_state
 * hook returns (with ACCEL_CHECKPOINT_PUT_STABLE, longer: see the flag);
 * do not modify or free it before then. The stored dtype is
 * local's. Errors: ACCEL_ERROR_INVALID_ARGUMENT (slice outside the global
 * shape, global shape differs from an earlier put of the same name,
 * reserved not 0). When: inside save_state only. */
typedef AccelStatus AccelCheckpointPutFn(AccelHost* host,
                                         const AccelCheckpointSliceArgs* args);

/* Fills `local` (caller-allocated, any place) with the rectangle at
 * global_offset of the saved tensor, resharding from whatever slices were
 * saved; ordered on `stream`, complete when get returns for host memory.
 * Float dtypes are converted to local's dtype; FP8 is never converted
 * implicitly. Errors: ACCEL_ERROR_NOT_FOUND (no such tensor, or part of the
 * rectangle was never saved: the message names the region),
 * ACCEL_ERROR_INVALID_ARGUMENT (global shape differs: the message gives
 * both). When: inside load_state only. */
typedef AccelStatus AccelCheckpointGetFn(AccelHost* host,
                                         const AccelCheckpointSliceArgs* args);

/* What the checkpoint holds for a name. */
typedef struct AccelCheckpointTensorInfo {
  size_t struct_size;
  AccelExtensionBase* extensions;
  int32_t ndim;                  /* out */
  DLDataType dtype;              /* out: as saved */
  const int64_t* global_shape;   /* out: host-owned, valid until load_state
                                    returns */
} AccelCheckpointTensorInfo;

/* Fills *info (caller-owned; caller sets struct_size) for `name` in `space`;
 * ACCEL_ERROR_NOT_FOUND when absent (optional state, e.g. loading an FP8 run
 * from a checkpoint written without FP8). When: inside load_state only. */
typedef AccelStatus AccelCheckpointInfoFn(AccelHost* host,
                                          AccelCheckpointSpace space,
                                          const char* name,
                                          AccelCheckpointTensorInfo* info);

/* Stores a small UTF-8 text value (a recipe, counters as JSON) under `key`
 * in `space`; both borrowed. Rank 0's value is the one kept. When: inside
 * save_state only. */
typedef AccelStatus AccelCheckpointPutStringFn(AccelHost* host,
                                               AccelCheckpointSpace space,
                                               const char* key,
                                               const char* value);

/* Reads the value stored under `key` into *value (out): host-owned,
 * NUL-terminated, valid until load_state returns; ACCEL_ERROR_NOT_FOUND when
 * absent. When: inside load_state only. */
typedef AccelStatus AccelCheckpointGetStringFn(AccelHost* host,
                                               AccelCheckpointSpace space,
                                               const char* key,
                                               const char** value);

/* The checkpoint area of the services table. */
typedef struct AccelCheckpointServices {
  size_t struct_size;
  AccelExtensionBase* extensions;
  AccelCheckpointPutFn* put;
  AccelCheckpointGetFn* get;
  AccelCheckpointInfoFn* info;
  AccelCheckpointPutStringFn* put_string;
  AccelCheckpointGetStringFn* get_string;
} AccelCheckpointServices;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ACCEL_ABI_CHECKPOINT_H_ */
