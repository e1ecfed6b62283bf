// Conversion between the ABI's DLTensor views and ATen tensors, in both
// directions, with the ABI's rules checked on the way in (accel/tensor.h):
// strides never NULL when ndim > 0, lanes 1, non-negative shape, a dtype code
// the ABI defines, a device the host knows.
//
// Invariant: to_aten never copies — the returned tensor aliases the DLTensor's
// memory and is valid as long as that memory is; in-place ops on it write
// through. TensorView owns the shape/strides arrays its DLTensor points to and
// keeps the viewed tensor's storage alive.
//
// Deliberately independent of ATen/DLConvertor.h: torch ships its own
// ATen/dlpack.h under the same include guard as the system <dlpack/dlpack.h>
// the ABI uses, so the two must never meet in one translation unit.
//
// Thread-safety: the free functions are pure; a TensorView is not
// synchronised (one owner).
#pragma once

#include <ATen/ATen.h>
#include <accel/accel.h>

#include <optional>
#include <string>
#include <vector>

namespace accel::runtime {

// ---------------------------------------------------------------------------
// Dtypes and devices
// ---------------------------------------------------------------------------

// True for a (code, bits, lanes=1) combination the ABI defines, whether or
// not ATen can compute on it (packed FP6/FP4 cannot).
bool is_abi_dtype(DLDataType dtype);

// The ATen type of an ABI dtype; nullopt when ATen has none.
std::optional<at::ScalarType> to_scalar_type(DLDataType dtype);

// The ABI dtype of an ATen type; throws ServiceError(UNSUPPORTED) when the ABI
// has no code for it.
DLDataType to_dl_dtype(at::ScalarType type);

// "f32", "bf16", "float8_e4m3fn", "int64", or "code 99 bits 7 lanes 1".
std::string describe_dtype(DLDataType dtype);
std::string describe_shape(at::IntArrayRef shape);

// kDLCPU / kDLCUDAHost -> CPU, kDLCUDA -> CUDA (needs a CUDA-capable runtime);
// anything else throws ServiceError(UNSUPPORTED).
at::Device to_aten_device(DLDevice device, const char* what);
DLDevice to_dl_device(const at::Device& device);

// ---------------------------------------------------------------------------
// DLTensor -> at::Tensor
// ---------------------------------------------------------------------------

// Checks `tensor` against the ABI's rules; throws ServiceError
// (INVALID_ARGUMENT naming `what` and the problem, UNSUPPORTED for valid views
// the host cannot handle: negative strides, unknown devices).
void validate_tensor(const DLTensor* tensor, const char* what);

// A non-owning ATen view of `tensor` (validated first).
at::Tensor to_aten(const DLTensor* tensor, const char* what);

// An fp32 scalar argument (ndim 0, or one element) as a 0-dim ATen view.
at::Tensor fp32_scalar(const DLTensor* tensor, const char* what);

// ---------------------------------------------------------------------------
// at::Tensor -> DLTensor
// ---------------------------------------------------------------------------

// An owned DLTensor view of an ATen tensor. Not copyable or movable: handed-out
// `get()` pointers stay valid for the TensorView's lifetime, and reset() keeps
// the same address (it only rewrites the fields).
class TensorView {
 public:
  TensorView() = default;
  explicit TensorView(at::Tensor tensor) { reset(std::move(tensor)); }
  TensorView(const TensorView&) = delete;
  TensorView& operator=(const TensorView&) = delete;

  // Points the view at `tensor` (any strides, any mapped dtype). Throws
  // ServiceError(UNSUPPORTED) for a dtype the ABI has no code for.
  void reset(at::Tensor tensor);
  // Makes the view describe `tensor` but report `dtype` (an allocation whose
  // bytes are held as kByte storage, say) and `device`.
  void reset_raw(at::Tensor storage, void* data, DLDataType dtype, DLDevice device,
                 std::vector<int64_t> shape);
  // Lets go of the viewed tensor (and so of its storage); the view then
  // describes nothing (data NULL, ndim 0).
  void clear();

  const DLTensor* get() const { return &view_; }
  const at::Tensor& tensor() const { return tensor_; }

 private:
  void point_arrays();

  at::Tensor tensor_;  // keeps the storage alive
  std::vector<int64_t> shape_;
  std::vector<int64_t> strides_;
  DLTensor view_{};
};

}  // namespace accel::runtime
