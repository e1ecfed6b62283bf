// A DLTensor view of an at::Tensor for handing to plugins: the view owns its
// shape/stride arrays and a reference to the tensor, so it stays valid for as
// long as the view object lives (the hook call). CPU and CUDA tensors.
#pragma once

#include <accel/tensor.h>

#include <ATen/ATen.h>

#include <stdexcept>
#include <vector>

namespace accel::train {

inline DLDataType dl_dtype_of(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return {kDLFloat, 32, 1};
    case at::kDouble: return {kDLFloat, 64, 1};
    case at::kHalf: return {kDLFloat, 16, 1};
    case at::kBFloat16: return {kDLBfloat, 16, 1};
    case at::kLong: return {kDLInt, 64, 1};
    case at::kInt: return {kDLInt, 32, 1};
    default: throw std::invalid_argument(std::string("no DLPack view for dtype ") + at::toString(type));
  }
}

class DlView {
 public:
  explicit DlView(const at::Tensor& tensor)
      : tensor_(tensor), shape_(tensor.sizes().begin(), tensor.sizes().end()),
        strides_(tensor.strides().begin(), tensor.strides().end()) {
    view_.data = tensor_.data_ptr();
    view_.device = tensor_.is_cuda() ? DLDevice{kDLCUDA, static_cast<int32_t>(tensor_.get_device())}
                                     : DLDevice{kDLCPU, 0};
    view_.ndim = static_cast<int32_t>(shape_.size());
    view_.dtype = dl_dtype_of(tensor_.scalar_type());
    view_.shape = shape_.data();
    view_.strides = strides_.data();
    view_.byte_offset = 0;
  }
  DlView(const DlView&) = delete;
  DlView& operator=(const DlView&) = delete;
  const DLTensor* get() const { return &view_; }

 private:
  at::Tensor tensor_;
  std::vector<int64_t> shape_;
  std::vector<int64_t> strides_;
  DLTensor view_{};
};

}  // namespace accel::train
