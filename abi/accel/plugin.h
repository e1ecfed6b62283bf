/* accel/plugin.h — what a plugin is: entry symbol, descriptor, hooks.
 *
 * Defines: the entry symbol accel_plugin_init_v1, AccelHostInfo,
 * AccelPluginDescriptor (name, version, kind, conflicts, capabilities,
 * option schema) and AccelHooks with the args struct of every hook (the
 * gather codec hooks of 1.8 take the args of accel/gather_codec.h).
 *
 * LOADING. The host opens the file once, checks who may write to it and to
 * every directory above it (docs/plugins.md "Trust"), then inspects and
 * dlopens that same open file (RTLD_NOW | RTLD_LOCAL), and looks up
 * `accel_plugin_init_v<N>` for the newest ABI major N it
 * supports first, then older ones it still supports. A plugin may export
 * several majors to run on old and new hosts. A plugin exporting only
 * majors the host does not know is refused: "libaccel_x.so: built for ABI
 * major 2, this host supports 1". Within a major any minor is accepted in
 * both directions (struct_size does the rest, see accel/version.h).
 *
 * CALL ORDER (per process; one instance per plugin):
 *   accel_plugin_init_v1      descriptor; nothing else may happen yet
 *   create                    read options, validate, allocate the instance
 *   plan_model                declare mesh, splits, stages, storage
 *     (host resolves plans, builds groups, materialises its units)
 *   setup                     allocate shards, buckets, optimizer state
 *   load_state                only when resuming, after every setup
 *   per step:
 *     step_begin
 *     train_step (one plugin takes over) or, for each micro-batch,
 *       forward:  per unit in order: unit_forward_pre, linear chain,
 *                 unit_forward_post
 *       backward: per unit in reverse: unit_backward_pre, linear chain,
 *                 unit_backward_post, then gradients_ready on the last
 *                 micro-batch
 *     gradients_finalize      every asynchronous reduction completes
 *     clip_gradients          one plugin takes over, else the host's
 *     optimizer_step          one plugin takes over, else the host's
 *     step_end
 *     save_state              when the host checkpoints
 *   (an evaluation step: step_begin, forward with NO_GRAD flags, step_end)
 *   (1.8: inside a sharding plugin's unit hooks, its gather_codec service
 *   calls reach the codec provider's gather_* hooks, accel/gather_codec.h)
 *   teardown                  always, once, unless create failed
 * With several plugins, hooks run in plugin order (kind: parallel, then
 * precision, then observer; within a kind, --plugin order), except the hooks
 * that close what another opened — step_end, unit_*_post, teardown — which
 * run in reverse, so wrappers nest (the profiler's unit timing sits inside
 * fsdp's gather and release). A failing hook ends the run: later hooks of
 * that step are not called; teardown is.
 *
 * TAKE-OVERS. A NULL hook means "not mine": the host skips the plugin.
 * clip_gradients, optimizer_step and train_step are implemented by at most
 * one active plugin each (two is a configuration error naming both); when
 * none does, the host runs its default. The defaults know nothing of
 * sharding, so a plugin with ACCEL_CAP_SHARDS_GRADS or _OPTIMIZER must
 * implement clip_gradients and optimizer_step (the host refuses it
 * otherwise). An OBSERVER implements neither take-overs, nor plan_model,
 * nor the linear chain.
 *
 * THREADS. Every hook is called on the loop thread, one hook at a time,
 * except trace_event (any thread, concurrently). A plugin may start its own
 * threads in setup and must join them in teardown; from them it may call
 * only services marked "Thread: any".
 *
 * OWNERSHIP. Hook args are host-owned and borrowed for the call. A field
 * marked "out" is written by the plugin. Buffers the plugin allocated stay
 * its own, except where a field says "ownership passes to the host". */
#ifndef ACCEL_ABI_PLUGIN_H_
#define ACCEL_ABI_PLUGIN_H_

#include "accel/gather_codec.h"
#include "accel/options.h"
#include "accel/services.h"
#include "accel/status.h"
#include "accel/tensor.h"
#include "accel/trace.h"
#include "accel/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A plugin instance: the plugin's own type, opaque to the host, created by
 * the create hook and freed by teardown. */
typedef struct AccelPlugin AccelPlugin;

/* ------------------------------ Descriptor ------------------------------- */

typedef enum AccelPluginKind {
  ACCEL_PLUGIN_PARALLEL = 1,   /* shards, splits, reduces: fsdp, megatron */
  ACCEL_PLUGIN_PRECISION = 2,  /* changes numerics: fp8 */
  ACCEL_PLUGIN_OBSERVER = 3,   /* watches only: profiler; must not change
                                  numerics or take over a step */
  ACCEL_PLUGIN_KIND_FORCE_32BIT = 0x7fffffff
} AccelPluginKind;

/* Capability flags (AccelPluginDescriptor.capabilities). The host checks
 * them against the run and against each other before anything runs. */
#define ACCEL_CAP_CPU (UINT64_C(1) << 0)       /* runs on CPU-only ranks */
#define ACCEL_CAP_CUDA (UINT64_C(1) << 1)      /* runs on CUDA devices */
#define ACCEL_CAP_SHARDS_PARAMS (UINT64_C(1) << 2)    /* takes unit storage */
#define ACCEL_CAP_SHARDS_GRADS (UINT64_C(1) << 3)     /* owns grad shards */
#define ACCEL_CAP_SHARDS_OPTIMIZER (UINT64_C(1) << 4) /* owns optim state */
/* Data-parallel reduction: at most one such plugin, and it implements a hook
 * to reduce in (gradients_ready, gradients_finalize, unit_backward_post or
 * train_step; refused otherwise). The host then reduces nothing itself, and
 * after gradients_finalize every rank must hold the average over the data
 * group — `accel-host check-plugin` compares N ranks against one. */
#define ACCEL_CAP_REDUCES_GRADS (UINT64_C(1) << 5)
#define ACCEL_CAP_TENSOR_PARALLEL (UINT64_C(1) << 6)
#define ACCEL_CAP_PIPELINE_PARALLEL (UINT64_C(1) << 7)
#define ACCEL_CAP_RESHARD_ON_LOAD (UINT64_C(1) << 8)  /* loads checkpoints of
                                                         any strategy/world */
/* 1.8, the precision policy (accel/precision.h): the plugin honours the
 * policy's grad_comm_dtype in the gradient reduction it owns (with
 * ACCEL_CAP_REDUCES_GRADS), resp. its moment dtypes in the optimizer step it
 * owns. The host refuses a run whose policy asks a reducer or optimizer
 * owner for a part it does not declare. Flag bits only: 1.7 hosts ignore
 * them, and never set a policy. */
#define ACCEL_CAP_PRECISION_GRAD_COMM (UINT64_C(1) << 9)
#define ACCEL_CAP_PRECISION_MOMENTS (UINT64_C(1) << 10)

/* What a plugin is. Plugin-owned, immutable, valid until the library is
 * unloaded (static const data). */
typedef struct AccelPluginDescriptor {
  size_t struct_size;
  AccelExtensionBase* extensions;
  /* ACCEL_ABI_VERSION_MAJOR / _MINOR as the plugin was compiled; the major
   * must equal the entry symbol's. */
  AccelAbiVersion abi_version;
  /* [a-z][a-z0-9_]*; the file is libaccel_<name>.so; unique in a run. */
  const char* name;
  const char* version;        /* the plugin's own version, "1.2.0" */
  const char* description;    /* one line for --list-plugins */
  AccelPluginKind kind;
  uint32_t reserved;          /* 0 */
  uint64_t capabilities;      /* ACCEL_CAP_* */
  /* Names of plugins this one cannot run with (either side may declare). */
  const char* const* conflicts;
  size_t num_conflicts;
  /* The option schema: num_options pointers (accel/options.h). */
  const AccelOptionSpec* const* options;
  size_t num_options;
  /* Every hook the plugin may implement; create may narrow it. Its
   * struct_size is at least ABI 1.0's table (through trace_event). */
  const struct AccelHooks* hooks;
} AccelPluginDescriptor;

/* ------------------------------ Entry symbol ----------------------------- */

/* Flags of AccelHostInfo.flags. */
#define ACCEL_HOST_INFO_ONLY (UINT32_C(1) << 0)  /* loaded for --list-plugins,
                                                    --help or a check: only
                                                    the descriptor is wanted;
                                                    no hook will be called */

/* What the host tells a plugin at load. Host-owned, borrowed for the entry
 * call; `host` and `services` stay valid until teardown returned (in an
 * info-only load: until the library is unloaded). */
typedef struct AccelHostInfo {
  size_t struct_size;
  AccelExtensionBase* extensions;
  AccelAbiVersion abi_version;        /* the host's ABI version */
  const char* host_name;              /* "accel-host" */
  const char* host_version;           /* "0.1.0" */
  AccelHost* host;
  const AccelHostServices* services;
  const char* plugin_path;            /* the file being loaded */
  uint32_t flags;                     /* ACCEL_HOST_INFO_* */
  uint32_t reserved;                  /* 0 */
} AccelHostInfo;

/* The only symbol a plugin exports for ABI major 1.
 * Sets *descriptor (out) to the plugin's descriptor. May log and set_error
 * through info->services; must not allocate device memory, start threads or
 * touch the device (it runs in --list-plugins too). May be called once per
 * load. Thread: the host's main thread. */
typedef AccelStatus AccelPluginInitV1Fn(
    const AccelHostInfo* info, const AccelPluginDescriptor** descriptor);

#define ACCEL_PLUGIN_ENTRY_V1_NAME "accel_plugin_init_v1"

ACCEL_PLUGIN_EXPORT AccelStatus accel_plugin_init_v1(
    const AccelHostInfo* info, const AccelPluginDescriptor** descriptor);

/* ------------------------------ Lifecycle -------------------------------- */

typedef struct AccelHooks AccelHooks;

typedef struct AccelCreateArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  AccelHost* host;                     /* as in AccelHostInfo */
  const AccelHostServices* services;   /* as in AccelHostInfo */
  AccelPlugin* self;                   /* out: the instance (may stay NULL) */
  const AccelHooks* hooks;             /* out: optional narrower hook table
                                          for this run (an option switched a
                                          feature off); plugin-owned, valid
                                          until teardown; NULL = descriptor's */
} AccelCreateArgs;

/* Reads and cross-checks options (bad combinations fail here with one line)
 * and creates the instance. Options and identity are available; groups and
 * local shapes are not yet. A refusal returned as
 * ACCEL_ERROR_INVALID_ARGUMENT is reported as a usage error (exit 2), like a
 * value the option schema refuses; any other failure as a run failure. */
typedef AccelStatus AccelHookCreateFn(AccelCreateArgs* args);

typedef struct AccelPlanArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  const AccelModelInfo* model;   /* = model->get_info */
} AccelPlanArgs;

/* Declares this plugin's part of the plan through comm->set_mesh and the
 * model->plan_* services. Every plugin's plan_model runs before any is
 * resolved. */
typedef AccelStatus AccelHookPlanModelFn(AccelPlugin* self,
                                         const AccelPlanArgs* args);

/* Flags of AccelSetupArgs.flags. */
#define ACCEL_SETUP_RESUMING (UINT32_C(1) << 0)  /* load_state follows */

typedef struct AccelSetupArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  int64_t first_step;         /* 0, or the step a resumed run continues at */
  int32_t num_micro_batches;  /* per step (gradient accumulation), fixed */
  uint32_t flags;             /* ACCEL_SETUP_* */
} AccelSetupArgs;

/* Groups exist, local shapes are final, the host's units are materialised
 * and initialised. Allocate shards (fill them from materialize with
 * ACCEL_INIT_FROM_SEED), optimizer state, buckets, FP8 metadata. */
typedef AccelStatus AccelHookSetupFn(AccelPlugin* self,
                                     const AccelSetupArgs* args);

/* Frees everything the plugin owns (buffers, streams, events, groups,
 * threads, the instance). Called once, also after a failure; other plugins'
 * teardowns run even if this one fails. No service but logging, memory and
 * comm->destroy_group may be called from it. */
typedef AccelStatus AccelHookTeardownFn(AccelPlugin* self);

/* --------------------------------- Steps --------------------------------- */

/* Flags of AccelStepArgs.flags. */
#define ACCEL_STEP_EVAL (UINT32_C(1) << 0)     /* forward only, no update */
#define ACCEL_STEP_SKIPPED (UINT32_C(1) << 1)  /* step_end: non-finite
                                                  gradients, no update */

typedef struct AccelStepArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  int64_t step;               /* 0-based; = optimizer steps taken before */
  int32_t num_micro_batches;
  uint32_t flags;             /* ACCEL_STEP_* */
  double lr;                  /* this step's learning rate */
  AccelStream stream;         /* the compute stream */
  const DLTensor* loss;       /* step_end: fp32 scalar, mean over the step's
                                 micro-batches, on ranks of the last stage;
                                 else NULL */
  const DLTensor* grad_norm;  /* step_end: fp32 scalar total norm before
                                 clipping; NULL if not clipped */
} AccelStepArgs;

/* Called before the first micro-batch of a step. */
typedef AccelStatus AccelHookStepBeginFn(AccelPlugin* self,
                                         const AccelStepArgs* args);

/* Called after the optimizer step (or after forward, for ACCEL_STEP_EVAL).
 * In a training step the host has read the step's values from the device
 * by then (its one synchronisation of the step, after gradients_finalize):
 * work enqueued on the compute stream up to gradients_finalize, a copy into
 * pinned host memory included, has completed, and its results can be read
 * without synchronising again. `loss` and `grad_norm` are host memory. */
typedef AccelStatus AccelHookStepEndFn(AccelPlugin* self,
                                       const AccelStepArgs* args);

/* Flags of AccelTrainStepArgs.flags. Since 1.7: an evaluation batch of a
 * pipeline run (--eval-every with pipeline stages; without stages the host
 * evaluates with its own loop and never calls train_step for it): run every
 * micro-batch's forward with ACCEL_RUN_NO_GRAD and no backward; the host
 * reads the loss the last stage's forwards reach. */
#define ACCEL_TRAIN_STEP_EVAL (UINT32_C(1) << 0)
typedef struct AccelTrainStepArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  int64_t step;
  int32_t num_micro_batches;
  uint32_t flags;
  AccelStream stream;
} AccelTrainStepArgs;

/* Takes over forward and backward of every micro-batch of the step (a
 * pipeline schedule: 1F1B, interleaved). Runs units with
 * model->run_forward / run_backward and moves activations between stages
 * with comm send/recv. Must leave every local unit's gradient accumulated
 * over all micro-batches, as the host's loop would, and (on the last stage)
 * run every micro-batch's loss; the host checks both on every rank. With
 * ACCEL_TRAIN_STEP_EVAL (since 1.7; only ever with pipeline stages, and only
 * to owners of ABI 1.7 or later) `step` is the held-out batch's index, and
 * the hook runs each micro-batch's forward only (ACCEL_RUN_NO_GRAD). */
typedef AccelStatus AccelHookTrainStepFn(AccelPlugin* self,
                                         const AccelTrainStepArgs* args);

/* --------------------------------- Units --------------------------------- */

/* Flags of AccelUnitHookArgs.flags. */
#define ACCEL_UNIT_HOOK_RECOMPUTE (UINT32_C(1) << 0)  /* activation
                                                         checkpointing rerun */
#define ACCEL_UNIT_HOOK_NO_GRAD (UINT32_C(1) << 1)    /* eval forward */
#define ACCEL_UNIT_HOOK_LAST_MICRO_BATCH (UINT32_C(1) << 2)

typedef struct AccelUnitHookArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  int32_t unit;
  int32_t micro_batch;
  uint32_t flags;                  /* ACCEL_UNIT_HOOK_* */
  uint32_t reserved;               /* 0 */
  AccelStream stream;              /* the unit runs on it */
  /* forward_pre: the unit's input activation (NULL for token ids of unit
   * 0); forward_post: its output; backward_pre: gradient of its output;
   * backward_post: gradient of its input (NULL for unit 0). Host-owned,
   * valid for the call. */
  const DLTensor* activation;
  /* out, optional: a tensor to use instead of `activation` from here on
   * (sequence parallel scatters the embedding output, gathers before the
   * head). Allocate it with memory->allocate, category ACTIVATIONS, and set
   * both fields; ownership of the buffer passes to the host. */
  const DLTensor* replacement;
  AccelBuffer* replacement_buffer;
} AccelUnitHookArgs;

/* The four unit hooks share a type. Typical work: materialise the unit and
 * all_gather its parameters (pre), release and reduce_scatter (post),
 * prefetch the next unit, record timings. */
typedef AccelStatus AccelHookUnitFn(AccelPlugin* self,
                                    AccelUnitHookArgs* args);

typedef struct AccelGradientsReadyArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  int32_t unit;
  int32_t micro_batch;          /* the last one of the step */
  AccelStream stream;           /* the gradients are complete on it */
  const DLTensor* grads;        /* the unit's flat grad buffer (host view)
                                   when materialised, else NULL */
} AccelGradientsReadyArgs;

/* The unit's gradients for the whole step are complete (after its
 * unit_backward_post of the last micro-batch). Where data-parallel plugins
 * start bucket reductions, overlapped with the rest of backward. */
typedef AccelStatus AccelHookGradientsReadyFn(
    AccelPlugin* self, const AccelGradientsReadyArgs* args);

/* After the whole backward of the step (also after train_step): complete
 * every reduction started in gradients_ready (work_wait on `stream`), so
 * clipping and the optimizer see final gradients. Uses AccelStepArgs. */
typedef AccelStatus AccelHookGradientsFinalizeFn(AccelPlugin* self,
                                                 const AccelStepArgs* args);

/* ------------------------- Clipping, optimizer --------------------------- */

typedef struct AccelClipArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  double max_norm;              /* > 0 ("train.max_grad_norm" or the
                                   plugin's own option); +infinity: compute
                                   the norm only, scale nothing (the host
                                   asks for it to detect non-finite
                                   gradients under fp16 loss scaling, or to
                                   log it) */
  double norm_type;             /* 2.0 */
  AccelStream stream;
  const DLTensor* total_norm;   /* out: fp32 scalar, the global norm over all
                                   gradients of the model before clipping
                                   (host-owned, on the rank's device since
                                   1.14; the hook writes it) */
} AccelClipArgs;

/* Computes the global gradient norm over the groups the plugin shards or
 * splits over (each element counted once), writes total_norm and scales the
 * gradients it owns (kernels->squared_norm, comm->all_reduce,
 * kernels->clip_scale). */
typedef AccelStatus AccelHookClipFn(AccelPlugin* self,
                                    const AccelClipArgs* args);

typedef enum AccelOptimizerKind {
  ACCEL_OPTIMIZER_ADAMW = 0,
  ACCEL_OPTIMIZER_SGD = 1,
  ACCEL_OPTIMIZER_KIND_FORCE_32BIT = 0x7fffffff
} AccelOptimizerKind;

typedef struct AccelOptimizerStepArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  int64_t step;                 /* 1 on the first update (bias correction) */
  AccelOptimizerKind kind;
  uint32_t no_decay_roles;      /* bit (1 << AccelParamRole): weight decay 0
                                   for parameters of that role */
  double lr;                    /* scheduled for this step */
  double beta1;                 /* AdamW */
  double beta2;                 /* AdamW */
  double eps;                   /* AdamW */
  double weight_decay;          /* AdamW: decoupled; SGD: L2 */
  double momentum;              /* SGD */
  double dampening;             /* SGD */
  uint32_t sgd_flags;           /* ACCEL_SGD_* */
  uint32_t reserved;            /* 0 */
  const DLTensor* grad_scale;   /* fp32 scalar: 1/loss scale; NULL = 1 */
  const DLTensor* found_inf;    /* fp32 scalar on the device, non-zero:
                                   skip (1.14: the host's unread verdict;
                                   NULL under fp16 and for older plugins,
                                   whose skipped steps are not called) */
  AccelStream stream;
} AccelOptimizerStepArgs;

/* Updates every parameter the plugin owns the state of (its shards), with
 * kernels->adamw_step / sgd_step, then makes the full parameters that
 * compute uses consistent (ZeRO-1/2: all_gather the updated shards). A
 * non-zero found_inf means the step changes nothing: the host gives its skip
 * verdict there without reading it (a non-finite loss), so the plugin hands
 * it on to the kernels, which skip on the device. */
typedef AccelStatus AccelHookOptimizerStepFn(
    AccelPlugin* self, const AccelOptimizerStepArgs* args);

/* ---------------------------- Linear chain ------------------------------- */

/* Flags of the linear args. */
#define ACCEL_LINEAR_RECOMPUTE (UINT32_C(1) << 0)  /* checkpointing rerun */
#define ACCEL_LINEAR_NO_GRAD (UINT32_C(1) << 1)    /* keep nothing */

typedef struct AccelLinearForwardArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  int32_t unit;
  int32_t param;                /* index of the weight in the unit */
  int32_t micro_batch;
  uint32_t flags;               /* ACCEL_LINEAR_* */
  const DLTensor* input;        /* [tokens, in_local] */
  const DLTensor* weight;       /* [out_local, in_local] */
  const DLTensor* bias;         /* [out_local] or NULL */
  AccelStream stream;
  /* This link's private slot (the host gives each link its own): store
   * state for backward here; it comes back as AccelLinearBackwardArgs.saved.
   * Leave it NULL with ACCEL_LINEAR_NO_GRAD. */
  void** saved;
  const DLTensor* output;       /* out: y = x W^T + b */
  AccelBuffer* output_buffer;   /* out: output's buffer (memory->allocate,
                                   ACTIVATIONS); ownership passes to the
                                   caller of this link */
} AccelLinearForwardArgs;

typedef struct AccelLinearBackwardArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  int32_t unit;
  int32_t param;
  int32_t micro_batch;
  uint32_t flags;
  const DLTensor* grad_output;  /* [tokens, out_local] */
  const DLTensor* input;        /* the input this link got in forward (the
                                   host keeps the outermost one; a link that
                                   changed it passes its own down) */
  const DLTensor* weight;
  const DLTensor* grad_weight;  /* in/out: accumulate (+=) here */
  const DLTensor* grad_bias;    /* in/out: accumulate here; NULL if none */
  AccelStream stream;
  void* saved;                  /* what this link stored in forward; free
                                   it here */
  const DLTensor* grad_input;   /* out: dL/dx, [tokens, in] */
  AccelBuffer* grad_input_buffer; /* out: ownership passes to the caller */
} AccelLinearBackwardArgs;

/* The rest of the chain, as the host hands it to one link. Host-owned,
 * valid for the hook call only. A link calls `forward` (from linear_forward)
 * or `backward` (from linear_backward) at most once, with args it may have
 * changed (its own copy), or not at all when it computes the result itself.
 * The innermost link is the host's GEMM. */
typedef struct AccelLinearNext AccelLinearNext;

typedef AccelStatus AccelLinearForwardNextFn(const AccelLinearNext* next,
                                             AccelLinearForwardArgs* args);
typedef AccelStatus AccelLinearBackwardNextFn(const AccelLinearNext* next,
                                              AccelLinearBackwardArgs* args);

struct AccelLinearNext {
  size_t struct_size;
  AccelExtensionBase* extensions;
  AccelLinearForwardNextFn* forward;
  AccelLinearBackwardNextFn* backward;
  void* host_data;              /* the host's; do not touch */
};

/* A middleware link around every linear layer of the model: tensor parallel
 * (outermost) wraps FP8 wraps the default GEMM. */
typedef AccelStatus AccelHookLinearForwardFn(AccelPlugin* self,
                                             AccelLinearForwardArgs* args,
                                             const AccelLinearNext* next);
typedef AccelStatus AccelHookLinearBackwardFn(AccelPlugin* self,
                                              AccelLinearBackwardArgs* args,
                                              const AccelLinearNext* next);

/* ------------------------------ Checkpoints ------------------------------ */

typedef struct AccelStateArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  int64_t step;                 /* the step being saved / resumed at */
  int32_t saved_world_size;     /* load: the world that saved it; save: ours */
  uint32_t reserved;            /* 0 */
  /* load: comma-separated names of the plugins of the saving run;
   * host-owned, valid for the call. save: NULL. */
  const char* saved_plugins;
  AccelStream stream;
} AccelStateArgs;

/* save_state: put every tensor the plugin owns (accel/checkpoint.h).
 * load_state: get them back, resharding to this run's layout; absent
 * optional state is not an error. */
typedef AccelStatus AccelHookStateFn(AccelPlugin* self,
                                     const AccelStateArgs* args);

/* -------------------------------- Observer ------------------------------- */

/* Receives every trace event while this plugin captures (trace->set_capture;
 * once that turned it off, no call is in progress). Called from any thread,
 * concurrently; must be thread-safe, must not block, and may call no service
 * but log and, on the loop thread, trace->set_capture. Cannot fail. */
typedef void AccelHookTraceEventFn(AccelPlugin* self,
                                   const AccelTraceEvent* event);

/* -------------------------------- The table ------------------------------ */

/* Every hook is optional: NULL = not mine. Plugin-owned, immutable.
 * struct_size: sizeof(AccelHooks) as the plugin was compiled, never less than
 * ABI 1.0's (ACCEL_FIELD_END(AccelHooks, trace_event)); a shorter table is
 * refused. */
struct AccelHooks {
  size_t struct_size;
  AccelExtensionBase* extensions;
  AccelHookCreateFn* create;
  AccelHookPlanModelFn* plan_model;
  AccelHookSetupFn* setup;
  AccelHookStepBeginFn* step_begin;
  AccelHookStepEndFn* step_end;
  AccelHookUnitFn* unit_forward_pre;
  AccelHookUnitFn* unit_forward_post;
  AccelHookUnitFn* unit_backward_pre;
  AccelHookUnitFn* unit_backward_post;
  AccelHookGradientsReadyFn* gradients_ready;
  AccelHookGradientsFinalizeFn* gradients_finalize;
  AccelHookClipFn* clip_gradients;
  AccelHookOptimizerStepFn* optimizer_step;
  AccelHookTrainStepFn* train_step;
  AccelHookLinearForwardFn* linear_forward;
  AccelHookLinearBackwardFn* linear_backward;
  AccelHookStateFn* save_state;
  AccelHookStateFn* load_state;
  AccelHookTeardownFn* teardown;
  AccelHookTraceEventFn* trace_event;
  /* since 1.8 (accel/gather_codec.h): a PRECISION plugin's parameter gather
   * codec. All three or none; at most one plugin of a run has them. A table
   * of 1.7 or older ends before them: they read as NULL. */
  AccelHookGatherCodecQueryFn* gather_codec_query;
  AccelHookGatherCodecFn* gather_encode;
  AccelHookGatherCodecFn* gather_decode;
};

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ACCEL_ABI_PLUGIN_H_ */
