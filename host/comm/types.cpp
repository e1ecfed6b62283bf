// Names and sizes of the communication layer's enums (see types.h). Every
// switch covers its whole enum; a value outside it (a cast from an ABI
// integer the caller did not validate) maps to "invalid" or 0, never to UB.
#include "host/comm/types.h"

namespace accel::comm {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f64:
    case DType::i64:
      return 8;
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::f16:
    case DType::bf16:
      return 2;
    case DType::i8:
    case DType::u8:
    case DType::f8_e4m3:
    case DType::f8_e5m2:
      return 1;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::i8:
      return "i8";
    case DType::u8:
      return "u8";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::f8_e4m3:
      return "f8_e4m3";
    case DType::f8_e5m2:
      return "f8_e5m2";
  }
  return "invalid";
}

bool dtype_valid(DType dtype) { return dtype_size(dtype) != 0; }

bool dtype_is_integer(DType dtype) {
  return dtype == DType::i8 || dtype == DType::u8 || dtype == DType::i32 || dtype == DType::i64;
}

bool dtype_is_low_precision_float(DType dtype) {
  return dtype == DType::f16 || dtype == DType::bf16 || dtype == DType::f8_e4m3 || dtype == DType::f8_e5m2;
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
  }
  return "invalid";
}

bool reduce_op_valid(ReduceOp op) {
  return op == ReduceOp::sum || op == ReduceOp::avg || op == ReduceOp::max || op == ReduceOp::min;
}

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::ok:
      return "ACCEL_OK";
    case ErrorCode::invalid_argument:
      return "ACCEL_ERROR_INVALID_ARGUMENT";
    case ErrorCode::unsupported:
      return "ACCEL_ERROR_UNSUPPORTED";
    case ErrorCode::failed_precondition:
      return "ACCEL_ERROR_FAILED_PRECONDITION";
    case ErrorCode::timeout:
      return "ACCEL_ERROR_TIMEOUT";
    case ErrorCode::aborted:
      return "ACCEL_ERROR_ABORTED";
    case ErrorCode::internal:
      return "ACCEL_ERROR_INTERNAL";
  }
  return "ACCEL_ERROR_UNKNOWN";
}

std::string Status::to_string() const {
  if (ok()) return "ACCEL_OK";
  return std::string(error_code_name(code)) + ": " + message;
}

const char* backend_name(Backend backend) {
  switch (backend) {
    case Backend::auto_select:
      return "auto";
    case Backend::mpi:
      return "mpi";
    case Backend::nccl:
      return "nccl";
  }
  return "invalid";
}

}  // namespace accel::comm
