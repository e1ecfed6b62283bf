// MPI datatypes and reduction operators for every DType. MPI has no f16,
// bf16 or FP8 type, so those travel as contiguous byte types of their width
// and are reduced by user-defined MPI_Ops that decode both operands to fp32,
// combine them, and round the result back (low_precision.h). Each pairwise
// combine is exact in fp32 and rounded once, which is also how NCCL's ring
// treats bf16/fp16: partial sums travel in the element type between steps.
// max and min select one operand's bits (no rounding at all).
//
// Invariant: the table is built once per communicator after MPI_Init and
// freed before MPI_Finalize (or leaked to it); the operators are commutative,
// so MPI may combine in any order and every rank still gets the same bits.
// Thread-safety: read-only after construction.
#pragma once

#include <mpi.h>

#include <array>
#include <cstdint>

#include "host/comm/types.h"

namespace accel::comm {

class MpiTypeTable {
 public:
  MpiTypeTable();   // MPI must be initialised
  ~MpiTypeTable();  // frees what it created unless MPI is already finalised
  MpiTypeTable(const MpiTypeTable&) = delete;
  MpiTypeTable& operator=(const MpiTypeTable&) = delete;

  MPI_Datatype datatype(DType dtype) const { return types_[static_cast<size_t>(dtype)]; }
  // avg reduces with sum (the division follows: divide_in_place).
  MPI_Op op(DType dtype, ReduceOp op) const;

 private:
  std::array<MPI_Datatype, kNumDTypes> types_{};
  // [dtype][sum, max, min]
  std::array<std::array<MPI_Op, 3>, kNumDTypes> ops_{};
  std::array<MPI_Datatype, kNumDTypes> owned_types_{};  // MPI_DATATYPE_NULL: predefined
  std::array<std::array<MPI_Op, 3>, kNumDTypes> owned_ops_{};
};

// avg's second half: divides `count` elements at `data` by `divisor` in
// place, in the element type (in fp32, rounded once, for f16/bf16/FP8).
// Floating-point dtypes only.
void divide_in_place(void* data, int64_t count, DType dtype, int divisor);

// out[i] = in[i] op own[i] for `count` elements, exactly as the MPI
// operators of MpiTypeTable combine a received `in` into this rank's `own`
// (avg combines as sum); `out` may be `own`. The ring all_reduce reduces
// with it, so both paths round alike.
void reduce_local(const void* in, const void* own, void* out, int64_t count, DType dtype, ReduceOp op);

}  // namespace accel::comm
