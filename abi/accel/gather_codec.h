/* accel/gather_codec.h — parameter gather codecs (since ABI 1.8).
 *
 * Defines: the args of the three gather-codec calls (query, encode, decode),
 * which are both hooks a PRECISION plugin implements (AccelHooks, accel/
 * plugin.h) and services a sharding plugin calls (AccelGatherCodecServices,
 * reached as AccelHostServices.gather_codec). The host forwards each service
 * call to the one loaded plugin whose hook table has the codec hooks; the
 * two sides never learn each other's names.
 *
 * WHAT IT IS FOR. A sharding plugin (fsdp, ZeRO-3) all-gathers a unit's
 * parameters before its forward. A precision plugin that casts some of
 * those parameters for every use anyway (fp8 casts each block linear's
 * weight to E4M3 with a per-tensor scale) can let them travel in that
 * 1-byte form: each rank encodes its shard's elements of such a parameter
 * into codes, the codes are gathered (1 byte per element instead of the
 * parameter dtype's 2 or 4), and each rank decodes the gathered codes into
 * the full parameter buffer in its usual dtype. The codec promises that its
 * own later use of the decoded parameter gives exactly what it would have
 * given on the parameter gathered as is (fp8: re-casting the decoded weight
 * with the same scale returns the same codes), so numerics do not change;
 * only bytes on the wire do.
 *
 * ORDER. For one gather of one unit, the sharding plugin calls query, then
 * (when query encoded anything) encode on every rank of the sharding group
 * — the same unit, in the same order on every rank, even a rank whose shard
 * holds no encoded element (num_slices 0): encode may run collectives over
 * `group` — then gathers, then decode. A codec's answer for a parameter
 * holds until the next query of its unit (the precision plugin may key its
 * own use of the decoded parameter on it). Gathers of several units may
 * interleave (prefetch): query/encode of unit B may come between encode and
 * decode of unit A.
 *
 * ELEMENTS. A parameter's elements are its local tensor's, row-major; a
 * slice is a contiguous run of them: `offsets[i]` is the slice's first
 * element, the tensors' numel its length. Encode gets this rank's slices;
 * decode gets every rank's slices of every encoded parameter of the unit,
 * which together cover each such parameter exactly once.
 *
 * Thread: every call on the loop thread, from inside a hook (the sharding
 * plugin's unit hooks). Plain C; see accel/version.h for struct_size. */
#ifndef ACCEL_ABI_GATHER_CODEC_H_
#define ACCEL_ABI_GATHER_CODEC_H_

#include "accel/comm.h"
#include "accel/status.h"
#include "accel/tensor.h"
#include "accel/version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct AccelPlugin AccelPlugin;

/* Flags of the codec args. */
#define ACCEL_GATHER_CODEC_NO_GRAD (UINT32_C(1) << 0)  /* the gather feeds a
                                                          forward without
                                                          gradient
                                                          (evaluation) */

/* ------------------------------- Query ----------------------------------- */

typedef struct AccelGatherCodecQueryArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  int32_t unit;                 /* the unit being gathered */
  uint32_t flags;               /* ACCEL_GATHER_CODEC_* */
  DLDataType param_dtype;       /* what the gathered (decoded) buffer holds */
  int32_t num_params;           /* the unit's parameters (model->get_unit) */
  /* out: [num_params], caller-owned, zeroed by the caller. For each
   * parameter, the 1-byte dtype its elements travel as (bits 8, lanes 1:
   * ACCEL_DL_FLOAT8_E4M3FN, ...), or left zero (bits 0): gathered as is. */
  DLDataType* code_dtypes;
} AccelGatherCodecQueryArgs;

/* Says which of the unit's parameters this gather may carry encoded. The
 * answer may depend on `flags` (fp8: not in an evaluation forward that runs
 * in the run's precision) and stays valid for this gather's encode and
 * decode. Forgets any earlier answer for the unit. Never a collective. */
typedef AccelStatus AccelHookGatherCodecQueryFn(
    AccelPlugin* self, AccelGatherCodecQueryArgs* args);

/* ---------------------------- Encode, decode ----------------------------- */

typedef struct AccelGatherCodecArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  int32_t unit;
  uint32_t flags;               /* as given to query */
  int32_t num_slices;           /* may be 0 (encode on a rank without any) */
  uint32_t reserved;            /* 0 */
  /* Per slice, arrays of num_slices, caller-owned, borrowed for the call: */
  const int32_t* params;        /* the parameter (index in the unit); one
                                   query encoded */
  const int64_t* offsets;       /* first element of the slice in it */
  /* 1-D, the parameter dtype (query's param_dtype): encode reads this
   * rank's elements from them, decode writes the gathered parameter's
   * elements into them (out). */
  const DLTensor* const* values;
  /* 1-D, as many elements, the code dtype query gave: encode writes them
   * (out), decode reads them. */
  const DLTensor* const* codes;
  /* The group the unit is sharded over: the union of its ranks' slices is
   * the whole parameter (a codec needing a whole-tensor statistic reduces
   * over it). Host-owned, valid for the call. */
  AccelGroup* group;
  AccelStream stream;           /* order the work on it (NULL: compute) */
} AccelGatherCodecArgs;

/* encode: this rank's slices into codes, before the gather. May record
 * what the codec needs from the true values (fp8: their amax) and may run
 * collectives over `group` (every rank of it calls encode for the same
 * unit). decode: the gathered codes into the parameters' buffer, after the
 * gather; no collective. Neither keeps a pointer to the tensors. */
typedef AccelStatus AccelHookGatherCodecFn(AccelPlugin* self,
                                           const AccelGatherCodecArgs* args);

/* ---------------------------- The service -------------------------------- */

/* The same three calls as host services: the host forwards them to the
 * plugin providing the codec (at most one per run). With none, query
 * returns ACCEL_OK leaving every code dtype zero, and encode / decode fail
 * with ACCEL_ERROR_FAILED_PRECONDITION. A failure of the provider's hook
 * comes back as its status, with "gather_codec.<call>: plugin NAME: ..."
 * pending. When: from setup until teardown, inside a hook. Thread: loop
 * thread. The args are borrowed for the call. */
typedef AccelStatus AccelGatherCodecQueryFn(AccelHost* host,
                                            AccelGatherCodecQueryArgs* args);
typedef AccelStatus AccelGatherCodecFn(AccelHost* host,
                                       const AccelGatherCodecArgs* args);

typedef struct AccelGatherCodecServices {
  size_t struct_size;
  AccelExtensionBase* extensions;
  AccelGatherCodecQueryFn* query;
  AccelGatherCodecFn* encode;
  AccelGatherCodecFn* decode;
} AccelGatherCodecServices;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ACCEL_ABI_GATHER_CODEC_H_ */
