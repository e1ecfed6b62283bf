/* accel/tensor.h — tensors on the ABI: DLPack DLTensor views, FP8 dtype codes.
 *
 * Defines: the ACCEL_DL_* dtype codes DLPack 0.6 lacks, and small inline
 * helpers on DLDataType and DLTensor. Includes <dlpack/dlpack.h>.
 *
 * Every tensor crosses the ABI as a `DLTensor` view (never as an owning
 * object). Rules for every DLTensor on the ABI:
 *  - `strides` is never NULL when ndim > 0 (DLPack 0.6 allowed NULL for
 *    "compact row-major"; this ABI does not). Strides count elements.
 *  - The first element is at `(char*)data + byte_offset`; honour byte_offset.
 *  - `dtype.lanes` is 1. A dtype of all zeros means "unset / the default"
 *    wherever a field says so, and is invalid elsewhere.
 *  - `device` is the rank's device (accel/services.h AccelIdentity.device),
 *    or kDLCPU / kDLCUDAHost for host memory.
 *  - The struct, its shape and strides arrays, and the memory it views are
 *    owned by whoever made the view. A DLTensor* argument is borrowed for the
 *    duration of the call unless the function says otherwise; a DLTensor*
 *    output is owned by the callee and its lifetime is stated beside it.
 *  - Who allocates a tensor frees it. Plugins allocate through the host
 *    (accel/memory.h) so every byte is accounted.
 *  - Device work on a tensor is ordered by an explicit AccelStream argument
 *    (accel/memory.h); a view carries no stream.
 *
 * FP8 and other new dtype codes. Debian's libdlpack-dev 0.6 (DLPACK_VERSION
 * 60) stops at kDLComplex = 5. The codes below carry the numeric values
 * DLPack 1.1 assigned to kDLBool, kDLFloat8_*, kDLFloat6_* and kDLFloat4_*,
 * under ACCEL_-prefixed names so the header compiles unchanged against a
 * newer dlpack.h that defines the kDL* names itself (tests/abi checks that
 * the values agree when it does). The layout of DLTensor, DLDevice and
 * DLDataType is identical in DLPack 0.6 and 1.x. */
#ifndef ACCEL_ABI_TENSOR_H_
#define ACCEL_ABI_TENSOR_H_

#include <dlpack/dlpack.h>

#include "accel/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ----------------------------- Dtype codes ------------------------------- */

/* Values of DLDataType.code. kDLInt=0, kDLUInt=1, kDLFloat=2, kDLBfloat=4
 * come from dlpack.h itself; these are the DLPack 1.1 codes it may lack. */
#define ACCEL_DL_BOOL 6u                /* bits 8; 0 or 1 */
#define ACCEL_DL_FLOAT8_E3M4 7u         /* bits 8 */
#define ACCEL_DL_FLOAT8_E4M3 8u         /* bits 8; IEEE-like, has inf */
#define ACCEL_DL_FLOAT8_E4M3B11FNUZ 9u  /* bits 8 */
#define ACCEL_DL_FLOAT8_E4M3FN 10u      /* bits 8; max 448, no inf (OCP) */
#define ACCEL_DL_FLOAT8_E4M3FNUZ 11u    /* bits 8 */
#define ACCEL_DL_FLOAT8_E5M2 12u        /* bits 8; max 57344, has inf (OCP) */
#define ACCEL_DL_FLOAT8_E5M2FNUZ 13u    /* bits 8 */
#define ACCEL_DL_FLOAT8_E8M0FNU 14u     /* bits 8; power-of-two scales (MX) */
#define ACCEL_DL_FLOAT6_E2M3FN 15u      /* bits 6, packed */
#define ACCEL_DL_FLOAT6_E3M2FN 16u      /* bits 6, packed */
#define ACCEL_DL_FLOAT4_E2M1FN 17u      /* bits 4, packed */

/* ------------------------------ Dtype helpers ---------------------------- */

/* Builds a scalar (lanes = 1) dtype. */
static inline DLDataType accel_dtype(uint8_t code, uint8_t bits) {
  DLDataType t;
  t.code = code;
  t.bits = bits;
  t.lanes = 1;
  return t;
}

/* True for the all-zero "unset / default" dtype. */
static inline bool accel_dtype_is_unset(DLDataType t) {
  return t.code == 0 && t.bits == 0 && t.lanes == 0;
}

/* True when `a` and `b` are the same dtype. */
static inline bool accel_dtype_equal(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

/* True for the FP8 codes the kernels support: E4M3FN and E5M2. */
static inline bool accel_dtype_is_fp8(DLDataType t) {
  return t.bits == 8 && t.lanes == 1 &&
         (t.code == ACCEL_DL_FLOAT8_E4M3FN || t.code == ACCEL_DL_FLOAT8_E5M2);
}

/* Largest finite value of an FP8 dtype (the numerator of a delayed-scaling
 * scale), or 0 for any other dtype. */
static inline double accel_fp8_max(DLDataType t) {
  if (!accel_dtype_is_fp8(t)) return 0.0;
  return t.code == ACCEL_DL_FLOAT8_E4M3FN ? 448.0 : 57344.0;
}

/* ----------------------------- Tensor helpers ---------------------------- */

/* Number of elements of `t` (1 for ndim = 0). */
static inline int64_t accel_tensor_numel(const DLTensor* t) {
  int64_t n = 1;
  for (int32_t i = 0; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}

/* Bytes spanned by the elements of a contiguous `t` (sub-byte types packed). */
static inline uint64_t accel_tensor_nbytes(const DLTensor* t) {
  uint64_t bits = (uint64_t)accel_tensor_numel(t) * t->dtype.bits *
                  (t->dtype.lanes == 0 ? 1u : t->dtype.lanes);
  return (bits + 7u) / 8u;
}

/* True when `t` is compact row-major (C order); size-1 dims may have any
 * stride. Flat buffers, collectives and checkpoint slices require this. */
static inline bool accel_tensor_is_contiguous(const DLTensor* t) {
  int64_t expected = 1;
  for (int32_t i = t->ndim - 1; i >= 0; --i) {
    if (t->shape[i] != 1 && t->strides[i] != expected) return false;
    expected *= t->shape[i];
  }
  return true;
}

/* Address of the first element: data + byte_offset. */
static inline void* accel_tensor_begin(const DLTensor* t) {
  return (void*)((char*)t->data + t->byte_offset);
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ACCEL_ABI_TENSOR_H_ */
