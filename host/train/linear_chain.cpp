// The linear chain (see linear_chain.h).
#include "host/train/linear_chain.h"

#include <torch/csrc/autograd/custom_function.h>

#include "host/plugin/hook_dispatch.h"
#include "host/plugin/plugin_error.h"
#include "host/runtime/tensor_views.h"

namespace accel::train {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Autograd glue: the chain pointer and the Saved record travel as integers
// in saved_data (the only non-tensor storage AutogradContext offers). A
// linear without bias passes an empty tensor: autograd::Function refuses
// undefined inputs.
struct ChainedLinear : public torch::autograd::Function<ChainedLinear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, int64_t chain_address, int64_t unit, int64_t param,
                            int64_t flags) {
    auto* chain = reinterpret_cast<LinearChain*>(chain_address);
    auto saved = std::make_unique<LinearChain::Saved>();
    const int64_t in = x.size(-1);
    const at::Tensor x2 = x.reshape({-1, in}).contiguous();
    const at::Tensor real_bias = bias.numel() > 0 ? bias : at::Tensor();
    at::Tensor y = chain->forward(x2, weight, real_bias, static_cast<int32_t>(unit), static_cast<int32_t>(param),
                                  static_cast<uint32_t>(flags), *saved);
    ctx->save_for_backward({x2, weight, bias});
    ctx->saved_data["chain"] = chain_address;
    ctx->saved_data["saved"] = reinterpret_cast<int64_t>(saved.release());
    ctx->saved_data["unit"] = unit;
    ctx->saved_data["param"] = param;
    std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
    shape.back() = y.size(-1);
    return y.view(shape);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* chain = reinterpret_cast<LinearChain*>(ctx->saved_data["chain"].toInt());
    std::unique_ptr<LinearChain::Saved> saved(reinterpret_cast<LinearChain::Saved*>(ctx->saved_data["saved"].toInt()));
    const auto tensors = ctx->get_saved_variables();
    const at::Tensor& x2 = tensors[0];
    const at::Tensor& weight = tensors[1];
    const at::Tensor& bias = tensors[2];
    const at::Tensor grad_output = grads[0].reshape({-1, weight.size(0)}).contiguous();
    at::Tensor grad_weight = at::zeros_like(weight);
    at::Tensor grad_bias = bias.numel() > 0 ? at::zeros_like(bias) : at::Tensor();
    at::Tensor grad_input = chain->backward(grad_output, x2, weight, grad_weight, grad_bias,
                                            static_cast<int32_t>(ctx->saved_data["unit"].toInt()),
                                            static_cast<int32_t>(ctx->saved_data["param"].toInt()), *saved);
    std::vector<int64_t> shape(grads[0].sizes().begin(), grads[0].sizes().end());
    shape.back() = weight.size(1);
    return {grad_input.view(shape), grad_weight, grad_bias, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

LinearChain::LinearChain(std::vector<plugin::LoadedPlugin*> links, runtime::HostContext& context)
    : links_(std::move(links)), context_(context), host_(std::make_shared<AccelHost>()) {
  host_->context = &context_;
  cursors_.resize(links_.size() + 1);
  nexts_.resize(links_.size() + 1);
  for (size_t i = 0; i <= links_.size(); ++i) {
    cursors_[i] = Cursor{this, i};
    nexts_[i] = AccelLinearNext{sizeof(AccelLinearNext), nullptr, &next_forward, &next_backward, &cursors_[i]};
  }
}

LinearChain::~LinearChain() = default;

at::Tensor LinearChain::apply(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, int32_t unit,
                              int32_t param) {
  const bool needs_grad = at::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad());
  const at::Tensor no_bias = bias.defined() ? at::Tensor() : at::empty({0}, weight.options());
  return ChainedLinear::apply(x, weight, bias.defined() ? bias : no_bias, reinterpret_cast<int64_t>(this), static_cast<int64_t>(unit),
                              static_cast<int64_t>(param), static_cast<int64_t>((needs_grad ? 0u : ACCEL_LINEAR_NO_GRAD) |
                                                          (recompute_ ? ACCEL_LINEAR_RECOMPUTE : 0u)));
}

at::Tensor LinearChain::forward(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, int32_t unit,
                                int32_t param, uint32_t flags, Saved& saved) {
  saved.slots.assign(links_.size(), nullptr);
  runtime::TensorView x_view(x), w_view(weight);
  std::unique_ptr<runtime::TensorView> b_view;
  if (bias.defined()) b_view = std::make_unique<runtime::TensorView>(bias);
  AccelLinearForwardArgs args{};
  args.struct_size = sizeof(args);
  args.unit = unit;
  args.param = param;
  args.micro_batch = micro_;
  args.flags = flags;
  args.input = x_view.get();
  args.weight = w_view.get();
  args.bias = b_view ? b_view->get() : nullptr;
  current_ = &saved;
  const AccelStatus status = call_forward(0, &args);
  current_ = nullptr;
  if (status != ACCEL_OK) plugin::HookDispatcher::check(*links_.front(), "linear_forward", status);
  if (!args.output || !args.output_buffer) {
    throw plugin::PluginError("plugin " + links_.front()->name() + ": linear_forward returned no output");
  }
  return adopt(args.output, args.output_buffer);
}

at::Tensor LinearChain::backward(const at::Tensor& grad_output, const at::Tensor& x, const at::Tensor& weight,
                                 at::Tensor& grad_weight, at::Tensor& grad_bias, int32_t unit, int32_t param,
                                 Saved& saved) {
  runtime::TensorView go_view(grad_output), x_view(x), w_view(weight), gw_view(grad_weight);
  std::unique_ptr<runtime::TensorView> gb_view;
  if (grad_bias.defined()) gb_view = std::make_unique<runtime::TensorView>(grad_bias);
  AccelLinearBackwardArgs args{};
  args.struct_size = sizeof(args);
  args.unit = unit;
  args.param = param;
  args.micro_batch = micro_;
  args.grad_output = go_view.get();
  args.input = x_view.get();
  args.weight = w_view.get();
  args.grad_weight = gw_view.get();
  args.grad_bias = gb_view ? gb_view->get() : nullptr;
  current_ = &saved;
  const AccelStatus status = call_backward(0, &args);
  current_ = nullptr;
  if (status != ACCEL_OK) plugin::HookDispatcher::check(*links_.front(), "linear_backward", status);
  if (!args.grad_input || !args.grad_input_buffer) {
    throw plugin::PluginError("plugin " + links_.front()->name() + ": linear_backward returned no grad_input");
  }
  return adopt(args.grad_input, args.grad_input_buffer);
}

AccelStatus LinearChain::next_forward(const AccelLinearNext* next, AccelLinearForwardArgs* args) {
  const auto* cursor = static_cast<const Cursor*>(next->host_data);
  return cursor->chain->call_forward(cursor->link, args);
}

AccelStatus LinearChain::next_backward(const AccelLinearNext* next, AccelLinearBackwardArgs* args) {
  const auto* cursor = static_cast<const Cursor*>(next->host_data);
  return cursor->chain->call_backward(cursor->link, args);
}

AccelStatus LinearChain::call_forward(size_t link, AccelLinearForwardArgs* args) {
  if (link == links_.size()) return gemm_forward(args);
  plugin::LoadedPlugin& p = *links_[link];
  args->saved = &current_->slots[link];
  runtime::take_pending_error();
  return p.hooks().linear_forward(p.self, args, &nexts_[link + 1]);
}

AccelStatus LinearChain::call_backward(size_t link, AccelLinearBackwardArgs* args) {
  if (link == links_.size()) return gemm_backward(args);
  plugin::LoadedPlugin& p = *links_[link];
  args->saved = current_->slots[link];
  runtime::take_pending_error();
  return p.hooks().linear_backward(p.self, args, &nexts_[link + 1]);
}

AccelStatus LinearChain::gemm_forward(AccelLinearForwardArgs* args) {
  try {
    const at::Tensor x = runtime::to_aten(args->input, "linear input");
    const at::Tensor w = runtime::to_aten(args->weight, "linear weight").to(x.scalar_type());
    const at::Tensor b = args->bias ? runtime::to_aten(args->bias, "linear bias").to(x.scalar_type()) : at::Tensor();
    hand_out(at::linear(x, w, b), &args->output, &args->output_buffer);
    return ACCEL_OK;
  } catch (const std::exception& e) {
    runtime::set_pending_error(ACCEL_ERROR_INVALID_ARGUMENT, std::string("host GEMM: ") + e.what());
    return ACCEL_ERROR_INVALID_ARGUMENT;
  }
}

AccelStatus LinearChain::gemm_backward(AccelLinearBackwardArgs* args) {
  try {
    const at::Tensor go = runtime::to_aten(args->grad_output, "linear grad_output");
    const at::Tensor x = runtime::to_aten(args->input, "linear input");
    const at::Tensor w = runtime::to_aten(args->weight, "linear weight");
    at::Tensor gw = runtime::to_aten(args->grad_weight, "linear grad_weight");
    gw.add_(go.t().mm(x.to(go.scalar_type())).to(gw.scalar_type()));
    if (args->grad_bias) {
      at::Tensor gb = runtime::to_aten(args->grad_bias, "linear grad_bias");
      gb.add_(go.sum(0).to(gb.scalar_type()));
    }
    hand_out(go.mm(w.to(go.scalar_type())), &args->grad_input, &args->grad_input_buffer);
    return ACCEL_OK;
  } catch (const std::exception& e) {
    runtime::set_pending_error(ACCEL_ERROR_INVALID_ARGUMENT, std::string("host GEMM: ") + e.what());
    return ACCEL_ERROR_INVALID_ARGUMENT;
  }
}

void LinearChain::hand_out(const at::Tensor& value, const DLTensor** tensor, AccelBuffer** buffer) {
  const AccelMemoryServices& memory = *runtime::host_services()->memory;
  const std::vector<int64_t> shape(value.sizes().begin(), value.sizes().end());
  AccelAllocateArgs alloc{};
  alloc.struct_size = sizeof(alloc);
  alloc.place = value.is_cuda() ? ACCEL_MEMORY_DEVICE : ACCEL_MEMORY_HOST;
  alloc.category = ACCEL_MEMORY_ACTIVATIONS;
  alloc.dtype = runtime::to_dl_dtype(value.scalar_type());
  alloc.ndim = static_cast<int32_t>(shape.size());
  alloc.shape = shape.data();
  alloc.label = "linear chain";
  if (memory.allocate(host_.get(), &alloc) != ACCEL_OK) {
    throw std::runtime_error(runtime::take_pending_error().message);
  }
  runtime::to_aten(alloc.tensor, "linear output").copy_(value);
  *tensor = alloc.tensor;
  *buffer = alloc.buffer;
}

at::Tensor LinearChain::adopt(const DLTensor* tensor, AccelBuffer* buffer) {
  const at::Tensor view = runtime::to_aten(tensor, "linear chain result");
  std::shared_ptr<AccelHost> host = host_;
  return at::from_blob(
      view.data_ptr(), view.sizes(), view.strides(),
      [host, buffer](void*) { runtime::host_services()->memory->deallocate(host.get(), buffer, nullptr); },
      view.options());
}

}  // namespace accel::train
