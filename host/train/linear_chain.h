// The linear middleware chain of accel/plugin.h: every block linear of the
// model runs as link 0 -> link 1 -> ... -> the host's GEMM, forward and
// backward, where links are the plugins implementing linear_forward /
// linear_backward, outermost first (tensor parallel wraps FP8 wraps GEMM).
//
// A custom autograd function carries each call: forward walks the chain and
// keeps every link's `saved` slot; backward hands the slots back in the same
// order and accumulates dW, db into fresh tensors autograd then adds to the
// parameters' flat gradients. Buffers a link returns are adopted without a
// copy and freed through the memory services when the tensor dies.
// Loop thread only.
#pragma once

#include <accel/accel.h>

#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "host/plugin/loaded_plugin.h"
#include "host/runtime/host_context.h"

namespace accel::train {

class LinearChain {
 public:
  LinearChain(std::vector<plugin::LoadedPlugin*> links, runtime::HostContext& context);
  ~LinearChain();
  LinearChain(const LinearChain&) = delete;
  LinearChain& operator=(const LinearChain&) = delete;

  // y = x W^T + b through the chain; x is [..., in].
  at::Tensor apply(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, int32_t unit,
                   int32_t param);
  void set_micro_batch(int32_t micro) { micro_ = micro; }
  // While set, forward links see ACCEL_LINEAR_RECOMPUTE (an activation
  // checkpointing rerun of the unit).
  void set_recompute(bool recompute) { recompute_ = recompute; }

  // What one forward left for its backward: every link's slot.
  struct Saved {
    std::vector<void*> slots;
  };
  at::Tensor forward(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, int32_t unit,
                     int32_t param, uint32_t flags, Saved& saved);
  at::Tensor backward(const at::Tensor& grad_output, const at::Tensor& x, const at::Tensor& weight,
                      at::Tensor& grad_weight, at::Tensor& grad_bias, int32_t unit, int32_t param, Saved& saved);

 private:
  struct Cursor {
    LinearChain* chain;
    size_t link;  // the link this `next` calls; links_.size() = the host GEMM
  };
  static AccelStatus next_forward(const AccelLinearNext* next, AccelLinearForwardArgs* args);
  static AccelStatus next_backward(const AccelLinearNext* next, AccelLinearBackwardArgs* args);
  AccelStatus call_forward(size_t link, AccelLinearForwardArgs* args);
  AccelStatus call_backward(size_t link, AccelLinearBackwardArgs* args);
  AccelStatus gemm_forward(AccelLinearForwardArgs* args);
  AccelStatus gemm_backward(AccelLinearBackwardArgs* args);
  // Copies `value` into a host-owned ACTIVATIONS buffer (ownership to the caller).
  void hand_out(const at::Tensor& value, const DLTensor** tensor, AccelBuffer** buffer);
  // An at::Tensor over a buffer handed to us; frees the buffer when it dies.
  at::Tensor adopt(const DLTensor* tensor, AccelBuffer* buffer);

  std::vector<plugin::LoadedPlugin*> links_;
  runtime::HostContext& context_;
  // The host's own handle for its buffers; shared with the deleters of
  // adopted tensors, which may outlive a call.
  std::shared_ptr<AccelHost> host_;
  std::vector<Cursor> cursors_;
  std::vector<AccelLinearNext> nexts_;
  Saved* current_ = nullptr;  // the call in progress (for link slots)
  int32_t micro_ = 0;
  bool recompute_ = false;
};

}  // namespace accel::train
