// fused_ops.cpp — see fused_ops.h.
#include "host/model/fused_ops.h"

#include <ATen/DeviceAccelerator.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/custom_function.h>

#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>

#include "host/model/fused_ops_reference.h"
#include "host/model/cuda/fused_ops_kernel.h"
#include "host/util/log.h"

namespace accel::model::fused {
namespace {

namespace kernels = runtime::cuda_kernels;
using kernels::Storage;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

#if defined(ACCEL_HAVE_CUDA_KERNELS)
#define ACCEL_FUSED_KERNEL(name) &kernels::name
#else
#define ACCEL_FUSED_KERNEL(name) nullptr
#endif

std::optional<Storage> storage_of(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return Storage::f32;
    case at::kBFloat16: return Storage::bf16;
    case at::kHalf: return Storage::f16;
    default: return std::nullopt;
  }
}

Storage storage(const at::Tensor& t) {
  const std::optional<Storage> s = storage_of(t.scalar_type());
  if (!s) throw std::invalid_argument(std::string("fused ops: no kernel for dtype ") + c10::toString(t.scalar_type()));
  return *s;
}

template <typename T>
T* pointer(const at::Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

// One fused operation on `device`: the kernel on a CUDA device (on its
// current stream), the reference on the CPU.
template <typename Args>
void run(const at::Device& device, const Args& args, void (*reference)(const Args&),
         const char* (*kernel)(const Args&, void*)) {
  if (device.is_cpu()) {
    reference(args);
    return;
  }
  if (!device.is_cuda() || kernel == nullptr) {
    throw std::invalid_argument("fused ops: this build has no kernels for " + device.str());
  }
  const c10::DeviceGuard guard(device);
  void* stream = at::accelerator::getCurrentStream(device.index()).native_handle();
  if (const char* error = kernel(args, stream)) throw std::runtime_error(std::string("fused kernel: ") + error);
}

int64_t partial_rows_for(const at::Device& device, int64_t rows) {
#if defined(ACCEL_HAVE_CUDA_KERNELS)
  if (device.is_cuda()) {
    const c10::DeviceGuard guard(device);
    return kernels::norm_backward_blocks(rows);
  }
#endif
  (void)device;
  (void)rows;
  return 1;
}

bool same_device(const at::Tensor& a, const at::Tensor& b) { return !b.defined() || a.device() == b.device(); }

// ---- residual add + norm ------------------------------------------------

struct AddNormFunction : public torch::autograd::Function<AddNormFunction> {
  // delta and bias are optional (an undefined tensor cannot be an autograd
  // Function's input; a missing optional is not one).
  static variable_list forward(AutogradContext* ctx, const at::Tensor& residual,
                               const std::optional<at::Tensor>& delta, const at::Tensor& weight,
                               const std::optional<at::Tensor>& bias, double eps, bool centred, int64_t output_type) {
    const int64_t cols = residual.size(-1), rows = residual.numel() / cols;
    const at::Tensor input = residual.contiguous();
    const at::Tensor d = delta ? delta->contiguous() : at::Tensor();
    const at::Tensor w = weight.contiguous(), b = bias ? bias->contiguous() : at::Tensor();
    at::Tensor sum = d.defined() ? at::empty_like(input) : at::Tensor();
    at::Tensor out = at::empty(input.sizes(), input.options().dtype(static_cast<at::ScalarType>(output_type)));
    at::Tensor stats = at::empty({rows, 2}, input.options().dtype(at::kFloat));
    kernels::NormForward args;
    args.input = input.data_ptr();
    args.input_type = storage(input);
    args.delta = d.defined() ? d.data_ptr() : nullptr;
    args.delta_type = d.defined() ? storage(d) : Storage::f32;
    args.weight = w.data_ptr();
    args.bias = b.defined() ? b.data_ptr() : nullptr;
    args.weight_type = storage(w);
    args.sum = sum.defined() ? sum.data_ptr() : nullptr;
    args.output = out.data_ptr();
    args.output_type = storage(out);
    args.stats = pointer<float>(stats);
    args.rows = rows;
    args.cols = cols;
    args.eps = static_cast<float>(eps);
    args.centred = centred;
    run(input.device(), args, &fused_reference::norm_forward, ACCEL_FUSED_KERNEL(launch_norm_forward));
    ctx->save_for_backward({d.defined() ? sum : input, w, stats});
    ctx->saved_data["centred"] = centred;
    ctx->saved_data["has_delta"] = d.defined();
    ctx->saved_data["has_bias"] = b.defined();
    ctx->saved_data["delta_type"] = d.defined() ? static_cast<int64_t>(d.scalar_type()) : int64_t{0};
    if (!d.defined()) return {out};
    return {sum, out};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& normed_input = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& stats = saved[2];
    const bool has_delta = ctx->saved_data["has_delta"].toBool(), has_bias = ctx->saved_data["has_bias"].toBool();
    const at::Tensor grad_sum =
        has_delta && grads[0].defined() ? grads[0].to(normed_input.scalar_type()).contiguous() : at::Tensor();
    const at::Tensor& raw_grad_out = grads[has_delta ? 1 : 0];
    const at::Tensor grad_out = raw_grad_out.defined() ? raw_grad_out.contiguous() : at::Tensor();
    const int64_t cols = normed_input.size(-1), rows = normed_input.numel() / cols;
    const int64_t partial_rows = partial_rows_for(normed_input.device(), rows);
    const at::TensorOptions f32 = normed_input.options().dtype(at::kFloat);
    at::Tensor grad_input = at::empty_like(normed_input);
    at::Tensor weight_partials = at::empty({partial_rows, cols}, f32);
    at::Tensor bias_partials = has_bias ? at::empty({partial_rows, cols}, f32) : at::Tensor();
    kernels::NormBackward args;
    args.grad_output = grad_out.defined() ? grad_out.data_ptr() : nullptr;
    args.grad_type = grad_out.defined() ? storage(grad_out) : Storage::f32;
    args.grad_sum = grad_sum.defined() ? grad_sum.data_ptr() : nullptr;
    args.normed_input = normed_input.data_ptr();
    args.input_type = storage(normed_input);
    args.weight = weight.data_ptr();
    args.weight_type = storage(weight);
    args.stats = pointer<const float>(stats);
    args.grad_input = grad_input.data_ptr();
    args.weight_partials = pointer<float>(weight_partials);
    args.bias_partials = pointer<float>(bias_partials);
    args.partial_rows = partial_rows;
    args.rows = rows;
    args.cols = cols;
    args.centred = ctx->saved_data["centred"].toBool();
    run(normed_input.device(), args, &fused_reference::norm_backward, ACCEL_FUSED_KERNEL(launch_norm_backward));
    const at::Tensor grad_weight = weight_partials.sum(0).to(weight.scalar_type());
    const at::Tensor grad_bias = has_bias ? bias_partials.sum(0).to(weight.scalar_type()) : at::Tensor();
    const at::Tensor grad_delta =
        has_delta ? grad_input.to(static_cast<at::ScalarType>(ctx->saved_data["delta_type"].toInt())) : at::Tensor();
    return {grad_input, grad_delta, grad_weight, grad_bias, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// ---- SwiGLU ----------------------------------------------------------------

struct SwigluFunction : public torch::autograd::Function<SwigluFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up) {
    at::Tensor out = at::empty_like(gate);
    kernels::SwigluForward args;
    args.gate = gate.data_ptr();
    args.up = up.data_ptr();
    args.output = out.data_ptr();
    args.type = storage(gate);
    args.count = gate.numel();
    run(gate.device(), args, &fused_reference::swiglu_forward, ACCEL_FUSED_KERNEL(launch_swiglu_forward));
    ctx->save_for_backward({gate, up});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& gate = saved[0];
    const at::Tensor& up = saved[1];
    const at::Tensor grad = grads[0].to(gate.scalar_type()).contiguous();
    at::Tensor grad_gate = at::empty_like(gate), grad_up = at::empty_like(up);
    kernels::SwigluBackward args;
    args.grad_output = grad.data_ptr();
    args.gate = gate.data_ptr();
    args.up = up.data_ptr();
    args.grad_gate = grad_gate.data_ptr();
    args.grad_up = grad_up.data_ptr();
    args.type = storage(gate);
    args.count = gate.numel();
    run(gate.device(), args, &fused_reference::swiglu_backward, ACCEL_FUSED_KERNEL(launch_swiglu_backward));
    return {grad_gate, grad_up};
  }
};

// ---- rotary embeddings --------------------------------------------------------

at::Tensor rotated(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool backward) {
  at::Tensor out = at::empty_like(x);
  kernels::Rotary args;
  args.input = x.data_ptr();
  args.output = out.data_ptr();
  args.type = storage(x);
  args.cos = pointer<const float>(cos);
  args.sin = pointer<const float>(sin);
  args.positions = x.size(0);
  args.head_dim = x.size(-1);
  args.vectors = x.numel() / (args.positions * args.head_dim);
  args.backward = backward;
  run(x.device(), args, &fused_reference::rotary, ACCEL_FUSED_KERNEL(launch_rotary));
  return out;
}

struct RotaryFunction : public torch::autograd::Function<RotaryFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["dtype"] = static_cast<int64_t>(x.scalar_type());
    return rotated(x, cos, sin, /*backward=*/false);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    return {rotated(grads[0].to(dtype).contiguous(), saved[0], saved[1], /*backward=*/true), at::Tensor(),
            at::Tensor()};
  }
};

void require(bool supported, const char* what) {
  if (!supported) throw std::invalid_argument(std::string("fused ") + what + ": tensors it does not take");
}

}  // namespace

bool kernels_built() {
#if defined(ACCEL_HAVE_CUDA_KERNELS)
  return true;
#else
  return false;
#endif
}

bool fused_kernels_serve(const at::Device& device, bool enabled) {
  if (!enabled || !device.is_cuda() || !at::hasCUDA()) return false;
#if defined(ACCEL_HAVE_CUDA_KERNELS)
  // Asked once per device: a card this build has no code for keeps ATen's
  // composition, with one warning, rather than failing its first launch.
  static std::mutex mutex;
  static std::map<int, bool> runs_on;
  const std::lock_guard<std::mutex> lock(mutex);
  const int index = device.has_index() ? device.index() : -1;
  auto known = runs_on.find(index);
  if (known != runs_on.end()) return known->second;
  const c10::DeviceGuard guard(device);
  const bool runs = kernels::kernels_run_on_current_device();
  if (!runs) {
    log::warn("fused kernels: this build has no code for " + device.str() +
              "; ATen's composition serves it (rebuild with its architecture in -DCMAKE_CUDA_ARCHITECTURES)");
  }
  runs_on.emplace(index, runs);
  return runs;
#else
  return false;
#endif
}

bool add_norm_supported(const at::Tensor& residual, const at::Tensor& delta, const at::Tensor& weight,
                        const at::Tensor& bias) {
  if (residual.dim() < 1 || residual.numel() == 0 || !storage_of(residual.scalar_type())) return false;
  const int64_t cols = residual.size(-1);
  if (cols > kernels::kMaxNormCols) return false;
  // The weight (and bias) in fp32 or the stream's type.
  const auto weight_type = weight.scalar_type();
  if (weight_type != at::kFloat && weight_type != residual.scalar_type()) return false;
  if (weight.dim() != 1 || weight.size(0) != cols || !same_device(residual, weight)) return false;
  if (bias.defined() && (bias.scalar_type() != weight_type || !bias.sizes().equals(weight.sizes()) ||
                         !same_device(residual, bias))) {
    return false;
  }
  // The sum keeps the stream's type, as ATen's add would.
  return !delta.defined() ||
         (delta.sizes().equals(residual.sizes()) && storage_of(delta.scalar_type()) && same_device(residual, delta) &&
          at::promote_types(residual.scalar_type(), delta.scalar_type()) == residual.scalar_type());
}

AddNorm add_norm(const at::Tensor& residual, const at::Tensor& delta, const at::Tensor& weight,
                 const at::Tensor& bias, double eps, bool centred, at::ScalarType output_type) {
  require(add_norm_supported(residual, delta, weight, bias) && storage_of(output_type), "add_norm");
  auto optional = [](const at::Tensor& t) { return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt; };
  const variable_list out = AddNormFunction::apply(residual, optional(delta), weight, optional(bias), eps, centred,
                                                   static_cast<int64_t>(output_type));
  if (out.size() == 1) return {at::Tensor(), out[0]};
  return {out[0], out[1]};
}

bool swiglu_supported(const at::Tensor& gate, const at::Tensor& up) {
  return gate.sizes().equals(up.sizes()) && gate.scalar_type() == up.scalar_type() &&
         storage_of(gate.scalar_type()) && gate.is_contiguous() && up.is_contiguous() && same_device(gate, up);
}

at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up) {
  require(swiglu_supported(gate, up), "swiglu");
  return SwigluFunction::apply(gate, up);
}

bool rotary_supported(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  if (x.dim() < 2 || !x.is_contiguous() || !storage_of(x.scalar_type()) || x.size(-1) % 2 != 0) return false;
  for (const at::Tensor* angles : {&cos, &sin}) {
    if (angles->scalar_type() != at::kFloat || !angles->is_contiguous() || angles->dim() != 2 ||
        angles->size(0) != x.size(0) || angles->size(1) != x.size(-1) || !same_device(x, *angles)) {
      return false;
    }
  }
  return true;
}

at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  require(rotary_supported(x, cos, sin), "rotary");
  return RotaryFunction::apply(x, cos, sin);
}

bool cross_entropy_supported(const at::Tensor& logits, const at::Tensor& labels) {
  if (logits.dim() < 1 || !storage_of(logits.scalar_type()) || logits.size(-1) < 1) return false;
  return labels.numel() * logits.size(-1) == logits.numel() && same_device(logits, labels);
}

LossAndGrad cross_entropy_with_grad(const at::Tensor& logits, const at::Tensor& labels, double multiplier) {
  require(cross_entropy_supported(logits, labels), "cross_entropy");
  const at::NoGradGuard no_grad;
  const int64_t cols = logits.size(-1);
  at::Tensor rows = logits.reshape({-1, cols});  // a view, also of the padded head's narrowed output
  if (rows.stride(1) != 1) rows = rows.contiguous();
  const int64_t count = rows.size(0);
  const at::Tensor targets = labels.reshape({-1}).to(at::kLong).contiguous();
  at::Tensor row_losses = at::empty({count}, rows.options().dtype(at::kFloat));
  at::Tensor grad = at::empty({count, cols}, rows.options());
  kernels::CrossEntropy args;
  args.logits = rows.data_ptr();
  args.type = storage(rows);
  args.rows = count;
  args.cols = cols;
  args.row_stride = rows.stride(0);
  args.labels = pointer<const int64_t>(targets);
  args.row_losses = pointer<float>(row_losses);
  args.grad = grad.data_ptr();
  // autograd's nll_loss factor: the multiplier over the row count, in fp32.
  args.factor = static_cast<float>(multiplier) / static_cast<float>(count);
  run(rows.device(), args, &fused_reference::cross_entropy, ACCEL_FUSED_KERNEL(launch_cross_entropy));
  return {row_losses.mean(), grad.view(logits.sizes())};
}

}  // namespace accel::model::fused
