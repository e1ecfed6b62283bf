/* accel/model.h — the model as plugins see it: units, parameters, storage.
 *
 * Defines: unit kinds, parameter roles and parallel hints; AccelModelInfo,
 * AccelUnitInfo, AccelParamInfo; and AccelModelServices: inspect, plan
 * (split parameters, assign pipeline stages, take over a unit's storage,
 * activation checkpointing), materialise/release a unit's full storage, and
 * run forward/backward over a unit range.
 *
 * A model is an ordered list of units (embedding, blocks, head), indexed from
 * 0. Each unit keeps its parameters in one flat buffer, and its gradients in
 * a second flat buffer of the same layout: parameter p of the unit occupies
 * elements [flat_offset, flat_offset + numel) of both, in row-major order of
 * its local shape. Parameter values are a function of the run's seed and
 * the parameter's name, so any strategy starts from bit-identical weights.
 *
 * Phases (the services say which they allow):
 *   inspect  from `create` on           — model info; names, global shapes
 *   plan     inside `plan_model` only   — split params, stages, storage,
 *                                         checkpointing; recorded, resolved
 *                                         by the host after every plugin's
 *                                         plan_model returned
 *   run      from `setup` on            — local shapes final; materialise,
 *                                         release, views, run_forward/backward
 * Info pointers are host-owned and valid until teardown, but their contents
 * (local shapes, stages, flags) are final only from `setup` on.
 *
 * Storage. By default the host materialises both buffers of every unit of
 * this rank's pipeline stage before setup, keeps them, and zeroes the
 * gradients after each optimizer step. A buffer a plugin takes over
 * (plan_manage_storage) is not materialised by the host: the plugin calls
 * materialize before the unit runs (usually in unit_forward_pre /
 * unit_backward_pre, filling parameters from its shards, zeroing gradients)
 * and release after (unit_forward_post / unit_backward_post). The host does
 * not zero managed gradients. Running a unit whose buffers are not
 * materialised (forward: its parameters; backward: parameters and
 * gradients; the head also reads the embedding's, which it is tied to) ends
 * the run with an error naming the unit and the missing buffer.
 *
 * Activation checkpointing (set_checkpointing): the host runs such a unit's
 * forward without keeping activations, and just before its backward runs
 * unit_forward_pre, the forward and unit_forward_post again with
 * ACCEL_UNIT_HOOK_RECOMPUTE. The last unit (its output feeds the loss) is
 * never recomputed.
 *
 * Thread-safety: loop thread only. */
#ifndef ACCEL_ABI_MODEL_H_
#define ACCEL_ABI_MODEL_H_

#include "accel/comm.h"
#include "accel/memory.h"
#include "accel/status.h"
#include "accel/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* -------------------------------- Enums ---------------------------------- */

typedef enum AccelUnitKind {
  ACCEL_UNIT_OTHER = 0,
  ACCEL_UNIT_EMBEDDING = 1,  /* token (+ position) embedding; first unit */
  ACCEL_UNIT_BLOCK = 2,      /* a transformer block */
  ACCEL_UNIT_HEAD = 3,       /* final norm, output projection and loss */
  ACCEL_UNIT_KIND_FORCE_32BIT = 0x7fffffff
} AccelUnitKind;

typedef enum AccelParamRole {
  ACCEL_PARAM_OTHER = 0,
  ACCEL_PARAM_LINEAR_WEIGHT = 1,  /* [out_features, in_features] */
  ACCEL_PARAM_BIAS = 2,
  ACCEL_PARAM_NORM = 3,           /* norm scale (and shift) */
  ACCEL_PARAM_EMBEDDING = 4,      /* [vocab or positions, hidden] */
  /* 1.11: a mixture of experts' router, [experts, hidden]; applied by the
   * host's own code, never through a linear hook. */
  ACCEL_PARAM_ROUTER = 5,
  /* 1.11: every expert's weights of one projection stacked, [experts, ...]:
   * index 0 of dim 0 is expert 0. Applied by the host's own code, never
   * through a linear hook. A plugin built before 1.11 sees an unknown role:
   * it must treat it as ACCEL_PARAM_OTHER. */
  ACCEL_PARAM_EXPERTS = 6,
  ACCEL_PARAM_ROLE_FORCE_32BIT = 0x7fffffff
} AccelParamRole;

/* How tensor parallelism would split the parameter (Megatron's layers).
 * Once splits resolve, the host runs the model tensor-parallel over the split
 * group itself: Megatron's f / g operators around the column / row-parallel
 * block linears (a row-parallel bias added once, after the all_reduce), the
 * vocab-parallel embedding (masked lookup + all_reduce) and the
 * vocab-parallel cross entropy; the linear chain (accel/plugin.h) sees the
 * local shards. */
typedef enum AccelParallelHint {
  ACCEL_PARALLEL_REPLICATED = 0,  /* never split (norms, row-linear biases) */
  ACCEL_PARALLEL_COLUMN = 1,      /* split output features: dim 0 (and the
                                     bias); ColumnParallelLinear */
  ACCEL_PARALLEL_ROW = 2,         /* split input features: dim 1;
                                     RowParallelLinear */
  ACCEL_PARALLEL_VOCAB = 3,       /* split the vocabulary: dim 0;
                                     VocabParallelEmbedding / output layer */
  ACCEL_PARALLEL_HINT_FORCE_32BIT = 0x7fffffff
} AccelParallelHint;

/* --------------------------------- Info ---------------------------------- */

typedef struct AccelModelInfo {
  size_t struct_size;
  AccelExtensionBase* extensions;
  const char* name;                /* "gpt-small" */
  int32_t num_units;
  int32_t activation_ndim;
  const int64_t* activation_shape; /* the tensor passed between units for one
                                      micro-batch, before any split:
                                      [seq_len, micro_batch, hidden],
                                      sequence-major (Megatron's layout) so
                                      a sequence-parallel shard is a leading
                                      slice; linears see it as [tokens,
                                      hidden] */
  DLDataType activation_dtype;     /* compute dtype of activations */
  DLDataType param_dtype;          /* dtype of host-owned flat buffers */
  DLDataType compute_dtype;        /* the run's mixed precision (autocast) */
  uint32_t reserved;               /* 0 */
  int64_t num_params;              /* elements of all global parameters */
  int64_t flops_per_token;         /* forward+backward, for MFU reports */
  int64_t hidden_size;
  int64_t vocab_size;
  int64_t seq_len;
  int64_t micro_batch_size;        /* sequences per micro-batch and rank */
} AccelModelInfo;

/* Flags of AccelUnitInfo.flags (state; read them from setup on). */
#define ACCEL_UNIT_FLAG_LOCAL (UINT32_C(1) << 0)          /* on our stage */
#define ACCEL_UNIT_FLAG_PLUGIN_PARAMS (UINT32_C(1) << 1)  /* params managed */
#define ACCEL_UNIT_FLAG_PLUGIN_GRADS (UINT32_C(1) << 2)   /* grads managed */
#define ACCEL_UNIT_FLAG_CHECKPOINTED (UINT32_C(1) << 3)   /* recomputes acts */
#define ACCEL_UNIT_FLAG_PARAMS_MATERIALIZED (UINT32_C(1) << 4)
#define ACCEL_UNIT_FLAG_GRADS_MATERIALIZED (UINT32_C(1) << 5)
/* Since 1.7: a unit of another pipeline stage that this rank holds anyway,
 * because a local unit reads its storage (the tied head on the last stage
 * reads the embedding's token table). Its parameters must equal the
 * owner's (step it as the owner does), and its gradients here are only this
 * stage's part: the strategy sums them with the owner's before any data-
 * parallel reduction (Megatron's embedding group), and counts the unit
 * once in a global norm (on the owning stage). It is never in a
 * run_forward / run_backward range here, so no gradients_ready reaches it:
 * gradients_finalize is where a strategy reduces it. Never put in a
 * checkpoint by this rank. */
#define ACCEL_UNIT_FLAG_TIED_COPY (UINT32_C(1) << 6)

typedef struct AccelUnitInfo {
  size_t struct_size;
  AccelExtensionBase* extensions;
  const char* name;            /* "embedding", "blocks.3", "head" */
  int32_t index;
  AccelUnitKind kind;
  int32_t num_params;
  int32_t pipeline_stage;      /* owning stage; 0 before plans resolve */
  int64_t numel;               /* elements of the flat buffers (local) */
  uint32_t flags;              /* ACCEL_UNIT_FLAG_*, current */
  DLDataType param_dtype;      /* dtype of the host's storage for the unit */
} AccelUnitInfo;

typedef struct AccelParamInfo {
  size_t struct_size;
  AccelExtensionBase* extensions;
  const char* name;             /* "blocks.3.attn.qkv.weight": unique, stable
                                   across strategies; the checkpoint name */
  int32_t unit;
  int32_t index;                /* within the unit, 0..num_params-1 */
  AccelParamRole role;
  AccelParallelHint hint;
  int32_t ndim;
  DLDataType dtype;             /* dtype of the host's storage */
  const int64_t* global_shape;  /* ndim entries */
  const int64_t* local_shape;   /* ndim entries: this rank's slice after
                                   tensor-parallel splits (= global if none) */
  const int64_t* local_offset;  /* ndim entries: where the slice starts in
                                   the global tensor */
  int64_t flat_offset;          /* element offset in the unit's flat buffers;
                                   -1 for a tied reference (tied_unit) */
  int64_t numel;                /* elements of the local slice */
  int32_t split_dim;            /* dimension split by the plan, -1 if none */
  AccelGroupKind split_group;   /* the group it is split over */
  /* A tied parameter (the output layer sharing the embedding): the unit
   * and index of the storage owner; -1, -1 if not tied. When the owner is
   * on this rank, the reference has flat_offset -1 and uses (and
   * accumulates its gradient into) the owner's storage. When it is not
   * (pipeline: embedding on the first stage, head on the last), the
   * reference gets its own identically initialised copy in its unit, and
   * keeping the copies equal (all_reduce of their gradients over the ranks
   * holding one: Megatron's embedding group) is the pipeline plugin's job. */
  int32_t tied_unit;
  int32_t tied_index;
  /* 1.5: how many equal blocks dimension split_dim stacks, each split alike
   * (a fused QKV weight: 3, and local_offset is the offset inside a block);
   * 1 for any other split and for whole parameters. Local index i of that
   * dimension is global index (i / b) * (global / blocks) + local_offset + i % b
   * with b = local / blocks; indices past the global extent are the
   * padding of a VOCAB split (plan_split_param). Read it (and split_parts)
   * through ACCEL_STRUCT_HAS_FIELD: a 1.4 host does not fill them. */
  int32_t split_blocks;
  /* 1.5: how many slices the split cuts (the size of split_group); this rank
   * holds the slice at local_offset of each block; 1 for whole parameters. */
  int32_t split_parts;
} AccelParamInfo;

/* Sets *info (out) to the model's description. Phase: inspect. */
typedef AccelStatus AccelModelGetInfoFn(AccelHost* host,
                                        const AccelModelInfo** info);

/* Sets *info (out) to unit `unit`'s description. Phase: inspect. */
typedef AccelStatus AccelModelGetUnitFn(AccelHost* host, int32_t unit,
                                        const AccelUnitInfo** info);

/* Sets *info (out) to parameter `index` of unit `unit`. Phase: inspect. */
typedef AccelStatus AccelModelGetParamFn(AccelHost* host, int32_t unit,
                                         int32_t index,
                                         const AccelParamInfo** info);

/* Finds a parameter by `name` (borrowed) into *unit, *index (out).
 * ACCEL_ERROR_NOT_FOUND if absent. Phase: inspect. */
typedef AccelStatus AccelModelFindParamFn(AccelHost* host, const char* name,
                                          int32_t* unit, int32_t* index);

/* --------------------------------- Plan ---------------------------------- */

/* Flags selecting a unit's buffers (plan_manage_storage, materialize,
 * release, get_param_view). */
#define ACCEL_STORAGE_PARAMS (UINT32_C(1) << 0)
#define ACCEL_STORAGE_GRADS (UINT32_C(1) << 1)

/* Splits dimension `dim` of a parameter evenly over the standard group
 * `over` (ACCEL_GROUP_TENSOR for Megatron); rank i of that group holds the
 * i-th slice. The host splits a COLUMN weight's bias with it and computes
 * local shapes, offsets and flat layouts when plans resolve; an uneven split
 * fails then, naming the parameter. A fused QKV weight (GPT-2's c_attn: Q, K,
 * V stacked along dim 0) splits by heads: rank i holds the i-th slice of
 * each of the three blocks, and local_offset is the offset inside a block.
 * A VOCAB split pads the vocabulary to a multiple of the group size (the
 * padded rows are zeros). This host resolves splits over
 * ACCEL_GROUP_TENSOR only, and all COLUMN / ROW / VOCAB parameters or none
 * (it runs one layout). Phase: plan. */
typedef AccelStatus AccelModelPlanSplitParamFn(AccelHost* host, int32_t unit,
                                               int32_t index, int32_t dim,
                                               AccelGroupKind over);

/* Assigns units to pipeline stages: `stage_of_unit` (borrowed) has
 * num_units entries, each in [0, pipeline_size). A stage may own several
 * non-adjacent ranges (interleaved / virtual pipeline schedules). Without
 * a call, every unit belongs to stage 0. Phase: plan. */
typedef AccelStatus AccelModelPlanStagesFn(AccelHost* host,
                                           const int32_t* stage_of_unit,
                                           int32_t num_units);

/* Takes over the full storage of `unit` selected by `what`
 * (ACCEL_STORAGE_PARAMS and/or _GRADS): the host will not materialise it;
 * the calling plugin materialises and releases it around each use. FSDP
 * and ZeRO-3 take both, ZeRO-2 only the gradients. Two plugins taking the
 * same buffer of a unit is a configuration error. Phase: plan. */
typedef AccelStatus AccelModelPlanManageStorageFn(AccelHost* host,
                                                  int32_t unit,
                                                  uint32_t what);

/* Turns activation checkpointing of `unit` on or off: its activations are
 * dropped after forward and recomputed in backward (the unit's forward
 * hooks run again, with `recompute` set). Phase: plan, or between steps
 * (step_end to the next step_begin). */
typedef AccelStatus AccelModelSetCheckpointingFn(AccelHost* host, int32_t unit,
                                                 bool enabled);

/* -------------------------------- Storage -------------------------------- */

typedef enum AccelStorageInit {
  ACCEL_INIT_UNDEFINED = 0,  /* contents undefined: you will fill them */
  ACCEL_INIT_ZERO = 1,       /* zeros (gradients) */
  ACCEL_INIT_FROM_SEED = 2,  /* initial parameter values (seed + name) */
  ACCEL_STORAGE_INIT_FORCE_32BIT = 0x7fffffff
} AccelStorageInit;

typedef struct AccelMaterializeArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  int32_t unit;
  uint32_t what;              /* ACCEL_STORAGE_* */
  AccelStorageInit init;      /* for every requested buffer; FROM_SEED
                                 only with PARAMS alone */
  DLDataType param_dtype;     /* unset = AccelUnitInfo.param_dtype; bf16 for
                                 FSDP's mixed-precision param_dtype */
  DLDataType grad_dtype;      /* unset = param_dtype */
  uint32_t reserved;          /* 0 */
  AccelStream stream;         /* allocation and init are ordered here */
  const DLTensor* params;     /* out: flat 1-D view; host-owned, valid until
                                 released; NULL if not requested */
  const DLTensor* grads;      /* out: likewise */
} AccelMaterializeArgs;

/* Allocates the selected full flat buffers of a unit (accounted as PARAMS
 * / GRADS); a buffer already materialised is returned as it is (asking for
 * it in another dtype is ACCEL_ERROR_UNSUPPORTED). Only a buffer's manager
 * (the plugin that took it over; anyone else gets
 * ACCEL_ERROR_FAILED_PRECONDITION) calls it; in setup, with
 * ACCEL_INIT_FROM_SEED, to cut its shards from the initial values. Storage
 * dtypes are f32, bf16 and f16; while both buffers of a unit are
 * materialised they share one dtype, because autograd accumulates into the
 * parameters' gradients in place (ACCEL_ERROR_INVALID_ARGUMENT otherwise):
 * a plugin reducing in another dtype casts after backward. On host-kept
 * storage it returns the kept fp32 buffers. Phase: run. */
typedef AccelStatus AccelModelMaterializeFn(AccelHost* host,
                                            AccelMaterializeArgs* args);

/* Frees the selected full buffers of `unit` once the work enqueued on
 * `stream` is done; their views become invalid. Only a buffer's manager;
 * host-kept storage is not freed (a no-op). Autograd state saved in forward
 * survives a release: parameters gathered again before backward are what
 * backward reads. Phase: run. */
typedef AccelStatus AccelModelReleaseFn(AccelHost* host, int32_t unit,
                                        uint32_t what, AccelStream stream);

/* Sets *params and *grads (out, either may be NULL to skip) to views of the
 * unit's current flat buffers, NULL where not materialised. Host-owned,
 * valid until released. Phase: run. */
typedef AccelStatus AccelModelGetStorageFn(AccelHost* host, int32_t unit,
                                           const DLTensor** params,
                                           const DLTensor** grads);

/* Sets *view (out) to a view of one parameter (`what` =
 * ACCEL_STORAGE_PARAMS) or its gradient (ACCEL_STORAGE_GRADS) with its local
 * shape, inside the flat buffer. Host-owned, valid until released.
 * Phase: run. */
typedef AccelStatus AccelModelGetParamViewFn(AccelHost* host, int32_t unit,
                                             int32_t index, uint32_t what,
                                             const DLTensor** view);

/* ---------------------------------- Run ---------------------------------- */

/* Flags of AccelRunForwardArgs.flags. */
#define ACCEL_RUN_NO_GRAD (UINT32_C(1) << 0)  /* evaluation: keep nothing; the
                                                 only mode of a train_step
                                                 flagged ACCEL_TRAIN_STEP_EVAL,
                                                 refused in any other */

typedef struct AccelRunForwardArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  int32_t first_unit;         /* the range [first_unit, end_unit), all local */
  int32_t end_unit;
  int32_t micro_batch;        /* 0..num_micro_batches-1 of this step */
  uint32_t flags;             /* ACCEL_RUN_* */
  const DLTensor* input;      /* activation from the previous stage (borrowed
                                 for the call): [seq_len (/ tensor size under
                                 sequence parallelism), micro_batch, hidden],
                                 any floating dtype, on this rank's device;
                                 NULL when first_unit is 0: the host feeds
                                 the micro-batch's tokens */
  AccelStream stream;         /* NULL (the compute stream): the range runs
                                 there, its outputs are ordered there */
  const DLTensor* output;     /* out: the range's output activation;
                                 host-owned, valid until run_backward of the
                                 same range and micro-batch returned (with
                                 NO_GRAD: until the next run call), and never
                                 past the train_step hook's return */
  const DLTensor* loss;       /* out: fp32 scalar when the range ends with
                                 the last unit, else NULL; same lifetime */
} AccelRunForwardArgs;

/* Runs forward over a unit range for one micro-batch, calling every
 * plugin's unit hooks and linear chain on the way, and keeping what backward
 * needs. Used by plugins that take over the train step (pipeline
 * schedules). The host reads the micro-batch's tokens (first_unit 0) and
 * targets (a range ending with the last unit) itself, from this rank's share
 * of the step; `input` is copied, so the caller may reuse its buffer once
 * the call returned. At most one forward of a (first_unit, micro_batch) is
 * alive: a second before its run_backward is ACCEL_ERROR_FAILED_PRECONDITION,
 * as is a range with a unit of another stage. With the last unit the host
 * also counts the loss into the step's reported loss. Since 1.7 (NULL in
 * older hosts: check ACCEL_HAS_FN). Phase: run, inside the train_step hook
 * (ACCEL_ERROR_FAILED_PRECONDITION elsewhere). Thread: the loop thread (the
 * one that called train_step). */
typedef AccelStatus AccelModelRunForwardFn(AccelHost* host,
                                           AccelRunForwardArgs* args);

typedef struct AccelRunBackwardArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  int32_t first_unit;          /* a range run_forward ran for micro_batch */
  int32_t end_unit;
  int32_t micro_batch;
  uint32_t reserved;           /* 0 */
  const DLTensor* grad_output; /* gradient of the range's output, from the
                                  next stage (borrowed); NULL when the range
                                  ends with the last unit: the loss, divided
                                  by num_micro_batches, is the root */
  AccelStream stream;          /* NULL (the compute stream) */
  const DLTensor* grad_input;  /* out: gradient of the range's input, to send
                                  to the previous stage; host-owned, valid
                                  until the next run call for this
                                  micro-batch or the train_step hook's
                                  return; NULL when first_unit is 0 */
} AccelRunBackwardArgs;

/* Runs backward over the range for the micro-batch, accumulating parameter
 * gradients into the units' grad buffers and calling every plugin's unit
 * hooks (and gradients_ready on the last micro-batch, num_micro_batches - 1:
 * a schedule runs each range's micro-batches in order). Frees what the
 * forward kept. grad_output is read during the call only. A range
 * run_forward did not run for the micro-batch is
 * ACCEL_ERROR_FAILED_PRECONDITION. Since 1.7 (NULL in older hosts).
 * Phase: run, inside the train_step hook. Thread: the loop thread. */
typedef AccelStatus AccelModelRunBackwardFn(AccelHost* host,
                                            AccelRunBackwardArgs* args);

/* ------------------------------ Since 1.1 ------------------------------- */

/* Fills `out` (caller-owned; 1-D, contiguous, any place; f32, bf16 or f16)
 * with the initial values (seed + parameter name, as ACCEL_INIT_FROM_SEED
 * gives them) of elements [flat_begin, flat_begin + out->shape[0]) of
 * `unit`'s flat parameter buffer; elements at or past the unit's numel (the
 * padded tail of a last shard) are set to 0. Only that range is computed, and
 * nothing is materialised: a sharding plugin initialises its own shard
 * without any rank holding the whole unit (FSDP's cpu_ram_efficient_loading).
 * Works on any unit, managed or not. Ordered like a synchronous copy on the
 * compute stream. Errors: ACCEL_ERROR_INVALID_ARGUMENT (negative begin, bad
 * tensor). Phase: run. Check ACCEL_HAS_FN(model, init_range) first: a 1.0
 * host does not have it. */
typedef AccelStatus AccelModelInitRangeFn(AccelHost* host, int32_t unit,
                                          int64_t flat_begin,
                                          const DLTensor* out);

/* ------------------------------ Since 1.4 ------------------------------- */

/* Runs the regions outside the tensor-parallel linears (LayerNorms,
 * residuals, dropout) split along the sequence over the group `over`
 * (ACCEL_GROUP_TENSOR; Megatron's sequence parallelism): the host's
 * all-gather before each column-parallel region and reduce-scatter after
 * each row-parallel one replace its all-reduces, and the activation passed
 * between units is this rank's leading slice [seq_len / T, micro_batch,
 * hidden] of the sequence-major activation. Needs the plan to split
 * parameters over the same group (refused when plans resolve otherwise, as
 * is a seq_len the group size does not divide). The gradients of the
 * parameters left whole (norms, row-parallel biases, position embeddings)
 * are then partial sums per rank: summing them over the group is the
 * strategy's job, before any data-parallel reduction. Phase: plan. Check
 * ACCEL_HAS_FN(model, plan_sequence_parallel) first. */
typedef AccelStatus AccelModelPlanSequenceParallelFn(AccelHost* host,
                                                     AccelGroupKind over);

/* ------------------------------ Since 1.10 ------------------------------ */

/* How the ranks of a context group exchange what attention needs
 * (Megatron-Core's cp_comm_type). */
typedef enum AccelContextCommType {
  /* Ring attention: each rank keeps its queries; key/value blocks travel
   * around the ring, the next block's transfer overlapping the attention of
   * the block in hand; partial results merge through their log-sum-exp.
   * Causal masks are load-balanced: with ring size R the sequence is cut
   * into 2R chunks and ring rank r holds chunks r and 2R-1-r. */
  ACCEL_CONTEXT_P2P = 0,
  /* Ulysses: an all-to-all over heads before attention (each rank then
   * holds the whole sequence of heads / C heads) and back after it. The
   * query heads and the key/value heads of this rank's tensor slice must
   * divide by C. */
  ACCEL_CONTEXT_A2A = 1,
  /* Both: heads split over an all-to-all sub-group of `a2a_size` adjacent
   * context ranks, the ring over the C / a2a_size sub-groups. */
  ACCEL_CONTEXT_A2A_P2P = 2,
  /* Since 1.13. All-gather (Megatron-Core's all_gather): the P2P layout,
   * but each rank all-gathers every key/value block before attention (one
   * collective per layer, nothing left to overlap) and attends with its
   * queries to the whole sequence; backward gathers them again and
   * reduce-scatters their gradients to the owners. More memory for the
   * gathered blocks, cheapest where key/value heads are few (grouped-query
   * attention). A 1.12 host refuses it (INVALID_ARGUMENT). */
  ACCEL_CONTEXT_ALL_GATHER = 3,
  ACCEL_CONTEXT_COMM_FORCE_32BIT = 0x7fffffff
} AccelContextCommType;

typedef struct AccelContextParallelSpec {
  size_t struct_size;
  AccelExtensionBase* extensions;
  int32_t comm_type;  /* an AccelContextCommType */
  int32_t a2a_size;   /* ACCEL_CONTEXT_A2A_P2P: the all-to-all sub-group's
                         size, a divisor of C between 2 and C / 2, or 0 for
                         the largest such divisor that divides this rank's
                         query and key/value heads; 0 otherwise */
} AccelContextParallelSpec;

/* Splits every sequence over ACCEL_GROUP_CONTEXT (whose size the mesh's
 * context_size gave, > 1): each rank embeds, runs and scores the tokens of
 * its part, every position at its global index (learned positions and
 * rotary angles alike), and attention runs as `spec` says. The activation
 * passed between units is [seq_len / C (/ T under sequence parallelism),
 * micro_batch, hidden]. Each rank's loss is the mean over its tokens; the
 * data-parallel gradient average (DATA contains CONTEXT) makes the step the
 * whole sequence's. seq_len must divide into 2 * R * a2a chunks under a ring
 * of R ranks (a2a chunks without one), refused with one line otherwise, as
 * are head counts a2a does not divide. Evaluation runs split the same way;
 * generation runs without context parallelism. `spec` is borrowed for the
 * call. Phase: plan. Check ACCEL_HAS_FN(model, plan_context_parallel). */
typedef AccelStatus AccelModelPlanContextParallelFn(
    AccelHost* host, const AccelContextParallelSpec* spec);

/* The model area of the services table. */
typedef struct AccelModelServices {
  size_t struct_size;
  AccelExtensionBase* extensions;
  AccelModelGetInfoFn* get_info;
  AccelModelGetUnitFn* get_unit;
  AccelModelGetParamFn* get_param;
  AccelModelFindParamFn* find_param;
  AccelModelPlanSplitParamFn* plan_split_param;
  AccelModelPlanStagesFn* plan_stages;
  AccelModelPlanManageStorageFn* plan_manage_storage;
  AccelModelSetCheckpointingFn* set_checkpointing;
  AccelModelMaterializeFn* materialize;
  AccelModelReleaseFn* release;
  AccelModelGetStorageFn* get_storage;
  AccelModelGetParamViewFn* get_param_view;
  AccelModelRunForwardFn* run_forward;
  AccelModelRunBackwardFn* run_backward;
  AccelModelInitRangeFn* init_range;    /* since 1.1 */
  AccelModelPlanSequenceParallelFn* plan_sequence_parallel; /* since 1.4 */
  AccelModelPlanContextParallelFn* plan_context_parallel;   /* since 1.10 */
} AccelModelServices;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ACCEL_ABI_MODEL_H_ */
