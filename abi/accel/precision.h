/* accel/precision.h — the run's precision policy (ABI 1.8).
 *
 * Defines: AccelPrecisionPolicy and AccelPrecisionServices, the area through
 * which a PRECISION plugin states formats for state it does not own — the
 * wire format of the gradient reduction (owned by the host or a parallel
 * plugin) and the storage format of AdamW's moments (owned by whoever steps
 * the optimizer) — and through which those owners read it, without either
 * side knowing the other's name. MS-AMP's optimisation levels are the
 * motivating case: O1 reduces gradients in FP8, O2 also keeps AdamW's first
 * moment in FP8 and its second in FP16 (plugins/fp8/README.md).
 *
 * The policy is a request the owners must honour or refuse: a plugin that
 * reduces gradients (ACCEL_CAP_REDUCES_GRADS) or steps the optimizer
 * (an optimizer_step hook) declares ACCEL_CAP_PRECISION_GRAD_COMM /
 * ACCEL_CAP_PRECISION_MOMENTS (accel/plugin.h) when it implements the
 * corresponding part; the host refuses the run before planning when a
 * non-default part has an owner that does not declare it. Nothing is ever
 * silently ignored.
 *
 * Numerics the owners implement (what "honour" means):
 *
 *   Gradient communication with grad_comm_dtype FP8: per tensor (parameter)
 *   p, amax_p = max |g_p| on this rank; the amaxes are all-reduced with MAX
 *   over the reducing group of size N; scale_p is the largest power of two
 *   with amax_p * scale_p * H <= fp8_max, H = N * (1 + u)^(N - 2) for N > 2
 *   and N otherwise, u the format's unit roundoff (2^-4 E4M3FN, 2^-3 E5M2):
 *   no partial sum of N terms can overflow, even when each combine rounds
 *   it up (scale_p = 1 when amax_p is 0 or not finite); the wire holds
 *   fp8(g_p * scale_p); the reduction is SUM in the FP8 dtype (the host
 *   combines in fp32 and rounds once per combine, docs/communication.md);
 *   the result is decoded as fp32(q) * (1 / (scale_p * N)) (the average).
 *
 *   Moments with exp_avg_dtype E4M3FN / exp_avg_sq_dtype f16: each tensor's
 *   moment is stored as fmt(m * s) with one fp32 scale s per tensor; each
 *   AdamW step dequantises, updates in fp32 (the parameter is updated from
 *   the unquantised new moments), then re-chooses s from the new moment's
 *   amax as MS-AMP does, s = 2^floor(log2(fmt_max / amax)) with fmt_max 448
 *   (E4M3FN) or 65504 (f16), 1 when amax is 0 or not finite (the amax is
 *   agreed with MAX across ranks that hold parts of one tensor), and stores
 *   the moments with it (kernels->adamw_step_scaled, accel/kernels.h).
 *   Checkpoints keep fp32 moments: the dequantised values, exactly.
 *
 * Thread-safety: set_policy and get_policy on the loop thread only. */
#ifndef ACCEL_ABI_PRECISION_H_
#define ACCEL_ABI_PRECISION_H_

#include "accel/status.h"
#include "accel/tensor.h"
#include "accel/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------- The policy ------------------------------ */

/* A dtype with bits == 0 means "the owner's default" in every field below
 * (fp32 moments; the reducer's own reduce dtype for gradients). */
typedef struct AccelPrecisionPolicy {
  size_t struct_size;
  AccelExtensionBase* extensions;
  /* Wire format of the data-parallel gradient reduction: default, or
   * ACCEL_DL_FLOAT8_E4M3FN / ACCEL_DL_FLOAT8_E5M2 (scaled per tensor, as
   * above). */
  DLDataType grad_comm_dtype;
  /* AdamW first moment: default (fp32) or ACCEL_DL_FLOAT8_E4M3FN. */
  DLDataType exp_avg_dtype;
  /* AdamW second moment: default (fp32) or {kDLFloat, 16, 1}. */
  DLDataType exp_avg_sq_dtype;
  uint32_t reserved;        /* must be 0 */
} AccelPrecisionPolicy;

/* -------------------------------- set_policy ----------------------------- */

/* Sets the run's policy from `policy` (borrowed for the call; the host keeps
 * a copy). Only a plugin of kind ACCEL_PLUGIN_PRECISION may call it, and
 * only from its create (the entry call's create, accel/plugin.h), so every
 * reader sees the final policy; once set it cannot change — a second call
 * with a different policy fails with FAILED_PRECONDITION naming both
 * plugins. Unsupported dtypes fail with INVALID_ARGUMENT.
 * Thread: loop thread. */
typedef AccelStatus AccelSetPrecisionPolicyFn(
    AccelHost* host, const AccelPrecisionPolicy* policy);

/* -------------------------------- get_policy ----------------------------- */

/* Sets *policy (out) to the host's copy of the policy: every dtype bits == 0
 * when no plugin set one. Host-owned, valid until teardown, never changes
 * after the last plugin's create returned. When: from plan_model on (earlier
 * calls may not see a policy set by a plugin created later).
 * Thread: loop thread. */
typedef AccelStatus AccelGetPrecisionPolicyFn(
    AccelHost* host, const AccelPrecisionPolicy** policy);

/* The precision area of the services table (AccelHostServices.precision,
 * NULL before 1.8). */
typedef struct AccelPrecisionServices {
  size_t struct_size;
  AccelExtensionBase* extensions;
  AccelSetPrecisionPolicyFn* set_policy;
  AccelGetPrecisionPolicyFn* get_policy;
} AccelPrecisionServices;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ACCEL_ABI_PRECISION_H_ */
