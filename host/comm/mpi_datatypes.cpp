// MPI datatypes and user-defined reduction operators (see mpi_datatypes.h).
// One template instantiation per (format, operator): MPI_User_function has
// no context argument, so the format cannot be looked up at run time
// without a global; making it part of the function's type needs none.
#include "host/comm/mpi_datatypes.h"

#include <cmath>
#include <type_traits>

#include "host/comm/low_precision.h"

namespace accel::comm {
namespace {

// ------------------------------------------------------------- combines --

struct Sum {
  static float apply(float a, float b) { return a + b; }
};

// NaN wins, as in torch.maximum / torch.minimum.
struct Max {
  static bool first_wins(float a, float b) { return a != a || (b == b && a > b); }
};
struct Min {
  static bool first_wins(float a, float b) { return a != a || (b == b && a < b); }
};

// Three-operand kernels, out[i] = a[i] op b[i], where `b` plays MPI's
// inout role (this rank's own data). The MPI operators run them with
// out == b; the ring runs them with a separate output, which saves copying
// its input first.
template <class Codec>
void sum3(const void* a, const void* b, void* out, int64_t n) {
  using T = typename Codec::Storage;
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  T* z = static_cast<T*>(out);
  for (int64_t i = 0; i < n; ++i) z[i] = Codec::encode(Sum::apply(Codec::decode(x[i]), Codec::decode(y[i])));
}

// Selection keeps the winner's exact bits: no rounding, -0 and NaN payloads
// preserved.
template <class Codec, class Select>
void select3(const void* a, const void* b, void* out, int64_t n) {
  using T = typename Codec::Storage;
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  T* z = static_cast<T*>(out);
  for (int64_t i = 0; i < n; ++i)
    z[i] = Select::first_wins(Codec::decode(x[i]), Codec::decode(y[i])) ? x[i] : y[i];
}

template <class Codec>
void sum_fn(void* in, void* inout, int* len, MPI_Datatype*) {
  sum3<Codec>(in, inout, inout, *len);
}

template <class Codec, class Select>
void select_fn(void* in, void* inout, int* len, MPI_Datatype*) {
  select3<Codec, Select>(in, inout, inout, *len);
}

template <class Codec>
void divide_codec(void* data, int64_t count, int divisor) {
  using T = typename Codec::Storage;
  T* p = static_cast<T*>(data);
  const float d = static_cast<float>(divisor);
  for (int64_t i = 0; i < count; ++i) p[i] = Codec::encode(Codec::decode(p[i]) / d);
}

template <class T>
void divide_native(void* data, int64_t count, int divisor) {
  T* p = static_cast<T*>(data);
  const T d = static_cast<T>(divisor);
  for (int64_t i = 0; i < count; ++i) p[i] /= d;
}

// MPI's predefined operators on native types, as Open MPI computes them
// (ompi/mca/op/base: out = out > in ? out : in, with b as `out`'s old value).
// Integers add in unsigned arithmetic: wrap-around like MPI's, without
// signed-overflow UB.
template <class T>
void native3(const void* a, const void* b, void* out, int64_t count, ReduceOp op) {
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  T* z = static_cast<T*>(out);
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      if constexpr (std::is_integral_v<T>) {
        using U = std::make_unsigned_t<T>;
        for (int64_t i = 0; i < count; ++i)
          z[i] = static_cast<T>(static_cast<U>(y[i]) + static_cast<U>(x[i]));
      } else {
        for (int64_t i = 0; i < count; ++i) z[i] = y[i] + x[i];
      }
      break;
    case ReduceOp::max:
      for (int64_t i = 0; i < count; ++i) z[i] = y[i] > x[i] ? y[i] : x[i];
      break;
    case ReduceOp::min:
      for (int64_t i = 0; i < count; ++i) z[i] = y[i] < x[i] ? y[i] : x[i];
      break;
  }
}

template <class Codec>
void codec3(const void* a, const void* b, void* out, int64_t count, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      sum3<Codec>(a, b, out, count);
      break;
    case ReduceOp::max:
      select3<Codec, Max>(a, b, out, count);
      break;
    case ReduceOp::min:
      select3<Codec, Min>(a, b, out, count);
      break;
  }
}

size_t op_slot(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return 0;
    case ReduceOp::max:
      return 1;
    case ReduceOp::min:
      return 2;
  }
  return 0;
}

template <class Codec>
void create_codec(DType dtype, std::array<MPI_Datatype, kNumDTypes>& types,
                  std::array<std::array<MPI_Op, 3>, kNumDTypes>& ops) {
  const size_t d = static_cast<size_t>(dtype);
  MPI_Type_contiguous(static_cast<int>(sizeof(typename Codec::Storage)), MPI_BYTE, &types[d]);
  MPI_Type_commit(&types[d]);
  MPI_Op_create(&sum_fn<Codec>, /*commute=*/1, &ops[d][0]);
  MPI_Op_create(&select_fn<Codec, Max>, 1, &ops[d][1]);
  MPI_Op_create(&select_fn<Codec, Min>, 1, &ops[d][2]);
}

}  // namespace

MpiTypeTable::MpiTypeTable() {
  owned_types_.fill(MPI_DATATYPE_NULL);
  for (auto& row : owned_ops_) row.fill(MPI_OP_NULL);
  const auto native = [this](DType dtype, MPI_Datatype type) {
    types_[static_cast<size_t>(dtype)] = type;
    ops_[static_cast<size_t>(dtype)] = {MPI_SUM, MPI_MAX, MPI_MIN};
  };
  native(DType::f32, MPI_FLOAT);
  native(DType::f64, MPI_DOUBLE);
  native(DType::i8, MPI_INT8_T);
  native(DType::u8, MPI_UINT8_T);
  native(DType::i32, MPI_INT32_T);
  native(DType::i64, MPI_INT64_T);
  create_codec<lowp::F16>(DType::f16, owned_types_, owned_ops_);
  create_codec<lowp::BF16>(DType::bf16, owned_types_, owned_ops_);
  create_codec<lowp::E4M3>(DType::f8_e4m3, owned_types_, owned_ops_);
  create_codec<lowp::E5M2>(DType::f8_e5m2, owned_types_, owned_ops_);
  for (size_t d = 0; d < kNumDTypes; ++d) {
    if (owned_types_[d] != MPI_DATATYPE_NULL) {
      types_[d] = owned_types_[d];
      ops_[d] = owned_ops_[d];
    }
  }
}

MpiTypeTable::~MpiTypeTable() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;  // MPI_Finalize released them
  // Freeing is allowed while operations using them are pending: MPI defers it.
  for (auto& type : owned_types_) {
    if (type != MPI_DATATYPE_NULL) MPI_Type_free(&type);
  }
  for (auto& row : owned_ops_) {
    for (auto& op : row) {
      if (op != MPI_OP_NULL) MPI_Op_free(&op);
    }
  }
}

MPI_Op MpiTypeTable::op(DType dtype, ReduceOp op) const {
  return ops_[static_cast<size_t>(dtype)][op_slot(op)];
}

void divide_in_place(void* data, int64_t count, DType dtype, int divisor) {
  switch (dtype) {
    case DType::f32:
      divide_native<float>(data, count, divisor);
      break;
    case DType::f64:
      divide_native<double>(data, count, divisor);
      break;
    case DType::f16:
      divide_codec<lowp::F16>(data, count, divisor);
      break;
    case DType::bf16:
      divide_codec<lowp::BF16>(data, count, divisor);
      break;
    case DType::f8_e4m3:
      divide_codec<lowp::E4M3>(data, count, divisor);
      break;
    case DType::f8_e5m2:
      divide_codec<lowp::E5M2>(data, count, divisor);
      break;
    default:
      break;  // integers: avg is rejected before any operation starts
  }
}

void reduce_local(const void* in, const void* own, void* out, int64_t count, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::f32:
      native3<float>(in, own, out, count, op);
      break;
    case DType::f64:
      native3<double>(in, own, out, count, op);
      break;
    case DType::i8:
      native3<int8_t>(in, own, out, count, op);
      break;
    case DType::u8:
      native3<uint8_t>(in, own, out, count, op);
      break;
    case DType::i32:
      native3<int32_t>(in, own, out, count, op);
      break;
    case DType::i64:
      native3<int64_t>(in, own, out, count, op);
      break;
    case DType::f16:
      codec3<lowp::F16>(in, own, out, count, op);
      break;
    case DType::bf16:
      codec3<lowp::BF16>(in, own, out, count, op);
      break;
    case DType::f8_e4m3:
      codec3<lowp::E4M3>(in, own, out, count, op);
      break;
    case DType::f8_e5m2:
      codec3<lowp::E5M2>(in, own, out, count, op);
      break;
  }
}

}  // namespace accel::comm
