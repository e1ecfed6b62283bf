// DLTensor <-> at::Tensor (see tensor_views.h). The dtype table below is the
// one place that pairs the ABI's codes (DLPack 1.1 values, accel/tensor.h)
// with ATen's scalar types.
#include "host/runtime/tensor_views.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "host/runtime/service_support.h"
#include "host/util/strformat.h"

namespace accel::runtime {
namespace {

struct DtypeEntry {
  uint8_t code;
  uint8_t bits;
  const char* name;
  std::optional<at::ScalarType> aten;  // nullopt: the ABI names it, ATen has none
};

const std::vector<DtypeEntry>& dtype_table() {
  static const std::vector<DtypeEntry> table = {
      {kDLFloat, 16, "f16", at::kHalf},
      {kDLFloat, 32, "f32", at::kFloat},
      {kDLFloat, 64, "f64", at::kDouble},
      {kDLBfloat, 16, "bf16", at::kBFloat16},
      {kDLInt, 8, "int8", at::kChar},
      {kDLInt, 16, "int16", at::kShort},
      {kDLInt, 32, "int32", at::kInt},
      {kDLInt, 64, "int64", at::kLong},
      {kDLUInt, 8, "uint8", at::kByte},
      {kDLUInt, 16, "uint16", at::ScalarType::UInt16},
      {kDLUInt, 32, "uint32", at::ScalarType::UInt32},
      {kDLUInt, 64, "uint64", at::ScalarType::UInt64},
      {kDLComplex, 32, "complex32", at::ScalarType::ComplexHalf},
      {kDLComplex, 64, "complex64", at::ScalarType::ComplexFloat},
      {kDLComplex, 128, "complex128", at::ScalarType::ComplexDouble},
      {ACCEL_DL_BOOL, 8, "bool", at::kBool},
      {ACCEL_DL_FLOAT8_E3M4, 8, "float8_e3m4", std::nullopt},
      {ACCEL_DL_FLOAT8_E4M3, 8, "float8_e4m3", std::nullopt},
      {ACCEL_DL_FLOAT8_E4M3B11FNUZ, 8, "float8_e4m3b11fnuz", std::nullopt},
      {ACCEL_DL_FLOAT8_E4M3FN, 8, "float8_e4m3fn", at::ScalarType::Float8_e4m3fn},
      {ACCEL_DL_FLOAT8_E4M3FNUZ, 8, "float8_e4m3fnuz", at::ScalarType::Float8_e4m3fnuz},
      {ACCEL_DL_FLOAT8_E5M2, 8, "float8_e5m2", at::ScalarType::Float8_e5m2},
      {ACCEL_DL_FLOAT8_E5M2FNUZ, 8, "float8_e5m2fnuz", at::ScalarType::Float8_e5m2fnuz},
      {ACCEL_DL_FLOAT8_E8M0FNU, 8, "float8_e8m0fnu", at::ScalarType::Float8_e8m0fnu},
      {ACCEL_DL_FLOAT6_E2M3FN, 6, "float6_e2m3fn", std::nullopt},
      {ACCEL_DL_FLOAT6_E3M2FN, 6, "float6_e3m2fn", std::nullopt},
      {ACCEL_DL_FLOAT4_E2M1FN, 4, "float4_e2m1fn", std::nullopt},
  };
  return table;
}

const DtypeEntry* find_dtype(DLDataType dtype) {
  if (dtype.lanes != 1) return nullptr;
  for (const DtypeEntry& entry : dtype_table()) {
    if (entry.code == dtype.code && entry.bits == dtype.bits) return &entry;
  }
  return nullptr;
}

}  // namespace

// ---------------------------------------------------------------------------
// Dtypes and devices
// ---------------------------------------------------------------------------

bool is_abi_dtype(DLDataType dtype) { return find_dtype(dtype) != nullptr; }

std::optional<at::ScalarType> to_scalar_type(DLDataType dtype) {
  const DtypeEntry* entry = find_dtype(dtype);
  return entry == nullptr ? std::nullopt : entry->aten;
}

DLDataType to_dl_dtype(at::ScalarType type) {
  for (const DtypeEntry& entry : dtype_table()) {
    if (entry.aten == type) return accel_dtype(entry.code, entry.bits);
  }
  fail(ACCEL_ERROR_UNSUPPORTED, std::string("ATen dtype ") + c10::toString(type) + " has no ABI code");
}

std::string describe_dtype(DLDataType dtype) {
  if (const DtypeEntry* entry = find_dtype(dtype)) return entry->name;
  return strformat("code %u bits %u lanes %u", dtype.code, dtype.bits, dtype.lanes);
}

std::string describe_shape(at::IntArrayRef shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

at::Device to_aten_device(DLDevice device, const char* what) {
  switch (device.device_type) {
    case kDLCPU:
    case kDLCUDAHost:
      return at::Device(at::kCPU);
    case kDLCUDA:
    case kDLCUDAManaged:
      if (!at::hasCUDA()) {
        fail(ACCEL_ERROR_UNSUPPORTED,
             strformat("%s is on cuda:%d, but this process has no CUDA device", what, device.device_id));
      }
      return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device.device_id));
    default:
      fail(ACCEL_ERROR_UNSUPPORTED,
           strformat("%s is on DLPack device type %d, which this host does not support", what,
                     static_cast<int>(device.device_type)));
  }
}

DLDevice to_dl_device(const at::Device& device) {
  if (device.is_cuda()) return DLDevice{kDLCUDA, device.has_index() ? device.index() : 0};
  if (device.is_cpu()) return DLDevice{kDLCPU, 0};
  fail(ACCEL_ERROR_UNSUPPORTED, "tensors on " + device.str() + " cannot cross the ABI");
}

// ---------------------------------------------------------------------------
// DLTensor -> at::Tensor
// ---------------------------------------------------------------------------

void validate_tensor(const DLTensor* tensor, const char* what) {
  if (tensor == nullptr) fail(ACCEL_ERROR_INVALID_ARGUMENT, std::string(what) + " is NULL");
  if (tensor->ndim < 0) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT, strformat("%s has ndim %d", what, tensor->ndim));
  }
  if (tensor->ndim > 0 && tensor->shape == nullptr) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT, strformat("%s has ndim %d but shape is NULL", what, tensor->ndim));
  }
  if (tensor->ndim > 0 && tensor->strides == nullptr) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT,
         strformat("%s has ndim %d but strides is NULL (the ABI requires strides)", what, tensor->ndim));
  }
  if (tensor->dtype.lanes != 1) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT,
         strformat("%s has dtype.lanes %u (the ABI requires 1)", what, tensor->dtype.lanes));
  }
  if (!is_abi_dtype(tensor->dtype)) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT,
         std::string(what) + " has unknown dtype (" + describe_dtype(tensor->dtype) + ")");
  }
  int64_t numel = 1;
  for (int32_t i = 0; i < tensor->ndim; ++i) {
    if (tensor->shape[i] < 0) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT,
           strformat("%s has negative extent %lld in dimension %d", what,
                     static_cast<long long>(tensor->shape[i]), i));
    }
    if (__builtin_mul_overflow(numel, tensor->shape[i], &numel)) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, std::string(what) + ": element count overflows int64");
    }
    if (tensor->strides[i] < 0) {
      fail(ACCEL_ERROR_UNSUPPORTED, strformat("%s has a negative stride in dimension %d", what, i));
    }
  }
  if (numel > 0 && tensor->data == nullptr) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT, std::string(what) + " has data NULL but " +
                                           std::to_string(numel) + " elements");
  }
}

at::Tensor to_aten(const DLTensor* tensor, const char* what) {
  validate_tensor(tensor, what);
  const std::optional<at::ScalarType> type = to_scalar_type(tensor->dtype);
  if (!type) {
    fail(ACCEL_ERROR_UNSUPPORTED,
         std::string(what) + " has dtype " + describe_dtype(tensor->dtype) + ", which the host cannot compute on");
  }
  const at::TensorOptions options =
      at::TensorOptions().dtype(*type).device(to_aten_device(tensor->device, what));
  const at::IntArrayRef sizes(tensor->shape, static_cast<size_t>(tensor->ndim));
  const at::IntArrayRef strides(tensor->strides, static_cast<size_t>(tensor->ndim));
  if (accel_tensor_numel(tensor) == 0) return at::empty_strided(sizes, strides, options);
  return at::from_blob(accel_tensor_begin(tensor), sizes, strides, options);
}

at::Tensor fp32_scalar(const DLTensor* tensor, const char* what) {
  at::Tensor t = to_aten(tensor, what);
  if (t.scalar_type() != at::kFloat || t.numel() != 1) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT, std::string(what) + " must be an fp32 scalar, got " +
                                           describe_dtype(tensor->dtype) + " " + describe_shape(t.sizes()));
  }
  return t.reshape({});
}

// ---------------------------------------------------------------------------
// at::Tensor -> DLTensor
// ---------------------------------------------------------------------------

void TensorView::reset(at::Tensor tensor) {
  const DLDataType dtype = to_dl_dtype(tensor.scalar_type());
  const DLDevice device = to_dl_device(tensor.device());
  shape_.assign(tensor.sizes().begin(), tensor.sizes().end());
  strides_.assign(tensor.strides().begin(), tensor.strides().end());
  view_.data = tensor.numel() == 0 ? nullptr : tensor.data_ptr();
  view_.device = device;
  view_.dtype = dtype;
  view_.byte_offset = 0;
  tensor_ = std::move(tensor);
  point_arrays();
}

void TensorView::reset_raw(at::Tensor storage, void* data, DLDataType dtype, DLDevice device,
                           std::vector<int64_t> shape) {
  shape_ = std::move(shape);
  strides_.assign(shape_.size(), 1);
  for (size_t i = shape_.size(); i-- > 1;) strides_[i - 1] = strides_[i] * std::max<int64_t>(shape_[i], 1);
  view_.data = data;
  view_.device = device;
  view_.dtype = dtype;
  view_.byte_offset = 0;
  tensor_ = std::move(storage);
  point_arrays();
}

void TensorView::clear() {
  tensor_ = at::Tensor();
  shape_.clear();
  strides_.clear();
  view_ = DLTensor{};
  point_arrays();
}

void TensorView::point_arrays() {
  view_.ndim = static_cast<int32_t>(shape_.size());
  view_.shape = shape_.empty() ? nullptr : shape_.data();
  view_.strides = strides_.empty() ? nullptr : strides_.data();
}

}  // namespace accel::runtime
