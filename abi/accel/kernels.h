/* accel/kernels.h — the small set of tensor kernels the host lends plugins.
 *
 * Defines: args structs for cast (incl. FP8 with scale and amax), axpy,
 * scale, fill, squared norm, clip scaling, fused AdamW and SGD steps on flat
 * buffers, GEMM with scales, and the FP8 delayed-scaling update; and
 * AccelKernelServices.
 *
 * Why they exist: a plugin built against these headers alone (no LibTorch, no
 * CUDA toolkit) can still shard an optimizer, clip gradients or run FP8. A
 * plugin may as well launch its own kernels on the stream it is given.
 *
 * Common rules. Every kernel is enqueued on args->stream (NULL = compute
 * stream) and returns without waiting. All tensors of one call are on one
 * device and must stay valid until the kernel completed on that stream.
 * Tensors written in place are marked "in/out". Scalars that a kernel reads
 * or writes on the device (scales, norms, amax, found_inf) are fp32 tensors
 * with ndim 0 or one element, so no step needs a device-to-host sync.
 * Float inputs may be f32, bf16 or f16 unless stated; arithmetic is fp32.
 * A dtype combination the host does not implement gives
 * ACCEL_ERROR_UNSUPPORTED naming it.
 *
 * Thread-safety: any thread; calls are ordered by their stream only. */
#ifndef ACCEL_ABI_KERNELS_H_
#define ACCEL_ABI_KERNELS_H_

#include "accel/memory.h"
#include "accel/status.h"
#include "accel/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --------------------------------- Cast ---------------------------------- */

/* Flags of AccelCastArgs.flags. */
#define ACCEL_CAST_AMAX_ACCUMULATE (UINT32_C(1) << 0) /* amax = max(amax, .) */

typedef struct AccelCastArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  const DLTensor* input;    /* any float dtype incl. FP8 */
  const DLTensor* output;   /* out: same shape; its dtype is the target */
  const DLTensor* scale;    /* fp32 scalar; NULL = 1 */
  const DLTensor* amax;     /* out: fp32 scalar, max |input| (before scaling);
                               NULL = not computed */
  uint32_t flags;           /* ACCEL_CAST_* */
  uint32_t reserved;        /* must be 0 */
  AccelStream stream;
  /* 1.9 (ACCEL_STRUCT_HAS_FIELD; a 1.8 host ignores it): */
  const DLTensor* output_transposed; /* out: NULL, or for a 2-D input
                               [rows, cols] a contiguous [cols, rows] tensor
                               of output's dtype that receives output's
                               transpose, written in the same pass */
} AccelCastArgs;

/* output = convert(input * scale), round to nearest even. Converting to FP8
 * saturates to +-accel_fp8_max (no inf); NaN stays NaN. To dequantise FP8,
 * pass the inverse scale. With output_transposed (1.9) the same codes are
 * also stored transposed: what an FP8 GEMM on tensor cores needs for the
 * backward products (they take the second operand column-major only), at
 * the cost of one write instead of a separate transpose pass. A plugin sets
 * it only when the host's ABI is 1.9 or newer (the SDK's cast_transposed
 * copies the transpose itself on older hosts). */
typedef AccelStatus AccelCastFn(AccelHost* host, const AccelCastArgs* args);

/* ------------------------------ Elementwise ------------------------------ */

typedef struct AccelAxpyArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  const DLTensor* x;
  const DLTensor* y;             /* in/out: same shape as x */
  double alpha;
  const DLTensor* alpha_tensor;  /* fp32 scalar; when not NULL, used instead
                                    of alpha (no host sync) */
  AccelStream stream;
} AccelAxpyArgs;

/* y += alpha * x (gradient accumulation, averaging, EMA). */
typedef AccelStatus AccelAxpyFn(AccelHost* host, const AccelAxpyArgs* args);

typedef struct AccelScaleArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  const DLTensor* x;             /* in/out */
  double alpha;
  const DLTensor* alpha_tensor;  /* fp32 scalar; overrides alpha if set */
  AccelStream stream;
} AccelScaleArgs;

/* x *= alpha. */
typedef AccelStatus AccelScaleFn(AccelHost* host, const AccelScaleArgs* args);

typedef struct AccelFillArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  const DLTensor* x;             /* out: every element set; any dtype */
  double value;
  AccelStream stream;
} AccelFillArgs;

/* x = value (zeroing gradients and histories). */
typedef AccelStatus AccelFillFn(AccelHost* host, const AccelFillArgs* args);

/* -------------------------------- Norms ---------------------------------- */

/* Flags of AccelSquaredNormArgs.flags. */
#define ACCEL_NORM_ACCUMULATE (UINT32_C(1) << 0)  /* output += instead of = */

typedef struct AccelSquaredNormArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  const DLTensor* const* inputs; /* num_inputs tensors; array borrowed */
  int32_t num_inputs;
  uint32_t flags;                /* ACCEL_NORM_* */
  const DLTensor* output;        /* out: fp32 scalar */
  AccelStream stream;
} AccelSquaredNormArgs;

/* output (+)= sum over inputs of sum(x^2), accumulated in fp32. An inf or
 * NaN anywhere makes output inf/NaN: that is the found-inf signal. A plugin
 * owning sharded gradients sums its shards, then all_reduces the scalar over
 * its groups (counting each replicated element once). */
typedef AccelStatus AccelSquaredNormFn(AccelHost* host,
                                       const AccelSquaredNormArgs* args);

typedef struct AccelClipScaleArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  const DLTensor* const* tensors;     /* in/out: num_tensors gradients */
  int32_t num_tensors;
  uint32_t reserved;                  /* must be 0 */
  const DLTensor* total_squared_norm; /* fp32 scalar, global over all ranks */
  const DLTensor* total_norm;         /* out: fp32 scalar, its square root
                                         (for AccelClipArgs); NULL */
  double max_norm;                    /* > 0; +infinity: scale nothing */
  double eps;                         /* 0 = 1e-6 */
  AccelStream stream;
} AccelClipScaleArgs;

/* tensors *= min(1, max_norm / (sqrt(total_squared_norm) + eps)), computed
 * on the device (torch.nn.utils.clip_grad_norm_ semantics). */
typedef AccelStatus AccelClipScaleFn(AccelHost* host,
                                     const AccelClipScaleArgs* args);

/* ------------------------------ Optimizers ------------------------------- */

/* Both fused steps work on flat (1-D, contiguous) buffers, typically one
 * unit's parameters or a shard of them. To give ranges different
 * hyperparameters (no weight decay on norms and biases, lr multipliers), call
 * the step on sub-views of the buffers. */
typedef struct AccelAdamWArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  const DLTensor* param;       /* in/out: fp32 (master) parameters */
  const DLTensor* grad;        /* gradient, any float dtype */
  const DLTensor* exp_avg;     /* in/out: fp32 first moment */
  const DLTensor* exp_avg_sq;  /* in/out: fp32 second moment */
  const DLTensor* param_copy;  /* out: the updated param cast to this
                                  tensor's dtype (bf16 compute copy); NULL */
  const DLTensor* grad_scale;  /* fp32 scalar multiplying grad (1/loss
                                  scale, 1/accumulation); NULL = 1 */
  const DLTensor* found_inf;   /* fp32 scalar; non-zero skips the whole step
                                  (every output unchanged); NULL = never */
  double lr;
  double beta1;
  double beta2;
  double eps;
  double weight_decay;         /* decoupled: param *= 1 - lr * weight_decay */
  int64_t step;                /* 1 on the first step; for bias correction */
  AccelStream stream;
} AccelAdamWArgs;

/* One AdamW step (torch.optim.AdamW semantics, bias-corrected). */
typedef AccelStatus AccelAdamWStepFn(AccelHost* host,
                                     const AccelAdamWArgs* args);

/* Flags of AccelSgdArgs.flags. */
#define ACCEL_SGD_NESTEROV (UINT32_C(1) << 0)

typedef struct AccelSgdArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  const DLTensor* param;       /* in/out: fp32 parameters */
  const DLTensor* grad;
  const DLTensor* momentum_buffer; /* in/out: fp32; NULL iff momentum == 0 */
  const DLTensor* param_copy;  /* out: as in AccelAdamWArgs; NULL */
  const DLTensor* grad_scale;  /* as in AccelAdamWArgs */
  const DLTensor* found_inf;   /* as in AccelAdamWArgs */
  double lr;
  double momentum;
  double dampening;
  double weight_decay;         /* coupled (L2): grad += weight_decay * param */
  int64_t step;                /* 1 on the first step (buffer = grad) */
  uint32_t flags;              /* ACCEL_SGD_* */
  uint32_t reserved;           /* must be 0 */
  AccelStream stream;
} AccelSgdArgs;

/* One SGD step (torch.optim.SGD semantics). */
typedef AccelStatus AccelSgdStepFn(AccelHost* host, const AccelSgdArgs* args);

/* --------------------------------- GEMM ---------------------------------- */

/* Flags of AccelGemmArgs.flags. */
#define ACCEL_GEMM_TRANS_A (UINT32_C(1) << 0)     /* use a^T */
#define ACCEL_GEMM_TRANS_B (UINT32_C(1) << 1)     /* use b^T */
#define ACCEL_GEMM_ACCUMULATE (UINT32_C(1) << 2)  /* out += instead of = */
/* 1.9: FP8 operands on tensor cores accumulate without cuBLASLt's periodic
 * promotion to fp32 (Hopper's "fast accumulation": faster, a few more bits
 * lost on long inner products; TransformerEngine's choice for the forward
 * GEMM, never for the gradients). Ignored elsewhere: the CPU's emulation
 * and 16-bit GEMMs are unchanged, and a 1.8 host ignores the bit. */
#define ACCEL_GEMM_FP8_FAST_ACCUMULATE (UINT32_C(1) << 3)

typedef struct AccelGemmArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  const DLTensor* a;          /* 2-D [m, k] ([k, m] with TRANS_A) */
  const DLTensor* b;          /* 2-D [k, n] ([n, k] with TRANS_B) */
  const DLTensor* out;        /* out: 2-D [m, n]; f32, bf16, f16 or FP8 */
  const DLTensor* bias;       /* 1-D [n], added to every row; NULL */
  const DLTensor* scale_a;    /* fp32 scalar: a's real value = a * scale_a
                                 (FP8 inputs); NULL = 1 */
  const DLTensor* scale_b;    /* likewise for b */
  const DLTensor* scale_out;  /* fp32 scalar: stored out = result * scale_out
                                 (FP8 output); NULL = 1 */
  const DLTensor* amax_out;   /* out: fp32 scalar, max |result| before
                                 scale_out; NULL = not computed */
  double alpha;               /* result = alpha * op(a) op(b) [+ bias] */
  uint32_t flags;             /* ACCEL_GEMM_* */
  uint32_t reserved;          /* must be 0 */
  AccelStream stream;
} AccelGemmArgs;

/* out (+)= alpha * (scale_a op(a)) (scale_b op(b)) + bias, fp32 accumulate.
 * A linear layer y = x W^T is a = x [tokens, in], b = W [out, in],
 * TRANS_B. FP8 operands: E4M3FN x E4M3FN, E4M3FN x E5M2, E5M2 x E4M3FN.
 * On a CUDA device FP8 operands run on FP8 tensor cores (compute capability
 * 8.9 and newer; an older GPU is refused with ACCEL_ERROR_UNSUPPORTED,
 * never emulated), whose accumulation between fp32 promotions is narrower
 * (about 1e-4 relative on an H100), and a bias with a 16-bit out is added
 * in out's type, as autocast's linear does. On CPU the result is the
 * dequantised fp32 product, rounded once. */
typedef AccelStatus AccelGemmFn(AccelHost* host, const AccelGemmArgs* args);

/* --------------------------- FP8 delayed scaling ------------------------- */

typedef enum AccelAmaxAlgo {
  ACCEL_AMAX_MOST_RECENT = 0,  /* amax = history row 0 */
  ACCEL_AMAX_MAX = 1,          /* amax = max over all history rows */
  ACCEL_AMAX_ALGO_FORCE_32BIT = 0x7fffffff
} AccelAmaxAlgo;

/* Flags of AccelFp8ScaleUpdateArgs.flags. */
#define ACCEL_FP8_ROLL_HISTORY (UINT32_C(1) << 0)  /* shift rows afterwards */

typedef struct AccelFp8ScaleUpdateArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  const DLTensor* amax_history; /* in/out: fp32 [history_len, n]; row 0 is
                                   the current step's amax (casts and GEMMs
                                   accumulate into it) */
  const DLTensor* scale;        /* in/out: fp32 [n] */
  const DLTensor* scale_inv;    /* out: fp32 [n], 1/scale; NULL */
  DLDataType fp8_dtype;         /* E4M3FN or E5M2: whose max to aim at */
  int32_t margin;               /* scale = fp8_max / amax / 2^margin */
  AccelAmaxAlgo algo;
  uint32_t flags;               /* ACCEL_FP8_* */
  AccelStream stream;
} AccelFp8ScaleUpdateArgs;

/* For each of the n tensors tracked: amax = algo(history column); if amax is
 * finite and > 0, scale = fp8_max / amax / 2^margin, else scale is kept;
 * scale_inv = 1 / scale. With ACCEL_FP8_ROLL_HISTORY, row i moves to row
 * i+1 (the last row drops) and row 0 is zeroed for the next step. */
typedef AccelStatus AccelFp8ScaleUpdateFn(AccelHost* host,
                                          const AccelFp8ScaleUpdateArgs* args);

/* ------------------- AdamW with scaled moments (1.8) ---------------------- */

/* MS-AMP's AdamW with low-precision moments (accel/precision.h), in two
 * passes so that ranks holding parts of one tensor can agree on its new
 * scales between them (a MAX all-reduce of the amaxes):
 *   UPDATE: m' = lerp(m, g, 1 - beta1), v' = beta2 v + (1 - beta2) g^2 in
 *     fp32 from the dequantised moments (m = stored / scale), and the
 *     parameter updated from m', v' exactly as adamw_step does; amax
 *     outputs accumulate max |m'| and max |v'|; the moments are not written.
 *   STORE: m', v' recomputed from the same inputs (bit-identical), stored
 *     as fmt(m' * new_scale), fmt(v' * new_sq_scale); the parameter is not
 *     written. Call it after UPDATE with the unchanged grad and moments.
 * A pass over fp32 moments with scales NULL is adamw_step itself. */
typedef enum AccelScaledAdamWPass {
  ACCEL_SCALED_ADAMW_UPDATE = 0,
  ACCEL_SCALED_ADAMW_STORE = 1,
  ACCEL_SCALED_ADAMW_PASS_FORCE_32BIT = 0x7fffffff
} AccelScaledAdamWPass;

typedef struct AccelScaledAdamWArgs {
  size_t struct_size;
  AccelExtensionBase* extensions;
  const DLTensor* param;       /* in/out (UPDATE): fp32 master, flat */
  const DLTensor* grad;        /* flat, any float dtype */
  const DLTensor* exp_avg;     /* in (UPDATE), out (STORE): fp32 or E4M3FN */
  const DLTensor* exp_avg_sq;  /* in (UPDATE), out (STORE): fp32 or f16 */
  const DLTensor* exp_avg_scale;     /* fp32 scalar the stored exp_avg was
                                        scaled with; NULL = 1 */
  const DLTensor* exp_avg_sq_scale;  /* likewise for exp_avg_sq */
  const DLTensor* exp_avg_new_scale;    /* STORE: fp32 scalar to store
                                           with; NULL = 1 */
  const DLTensor* exp_avg_sq_new_scale; /* STORE: likewise */
  const DLTensor* exp_avg_amax;     /* UPDATE, in/out: fp32 scalar,
                                       max(amax, max |m'|); NULL */
  const DLTensor* exp_avg_sq_amax;  /* UPDATE, in/out: likewise for v' */
  const DLTensor* param_copy;  /* UPDATE out: as in AccelAdamWArgs; NULL */
  const DLTensor* grad_scale;  /* as in AccelAdamWArgs */
  const DLTensor* found_inf;   /* as in AccelAdamWArgs: both passes skip */
  double lr;
  double beta1;
  double beta2;
  double eps;
  double weight_decay;         /* decoupled, over the whole view */
  int64_t step;                /* 1 on the first step */
  AccelScaledAdamWPass pass;
  uint32_t reserved;           /* must be 0 */
  AccelStream stream;
} AccelScaledAdamWArgs;

/* One pass of the scaled AdamW step. Every tensor is borrowed, as for every
 * kernel (valid until the kernel completed on args->stream); the host's fp32
 * temporaries of the view's size live for the call only. The scale scalars
 * are read on the host (a device sync on CUDA ranks). Thread: any, like
 * every kernel; when: from setup on (1.8 hosts; ACCEL_HAS_FN). UNSUPPORTED
 * for other moment dtypes. */
typedef AccelStatus AccelScaledAdamWStepFn(AccelHost* host,
                                           const AccelScaledAdamWArgs* args);

/* The kernel area of the services table. */
typedef struct AccelKernelServices {
  size_t struct_size;
  AccelExtensionBase* extensions;
  AccelCastFn* cast;
  AccelAxpyFn* axpy;
  AccelScaleFn* scale;
  AccelFillFn* fill;
  AccelSquaredNormFn* squared_norm;
  AccelClipScaleFn* clip_scale;
  AccelAdamWStepFn* adamw_step;
  AccelSgdStepFn* sgd_step;
  AccelGemmFn* gemm;
  AccelFp8ScaleUpdateFn* fp8_scale_update;
  /* 1.8 (ACCEL_HAS_FN): */
  AccelScaledAdamWStepFn* adamw_step_scaled;
} AccelKernelServices;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ACCEL_ABI_KERNELS_H_ */
