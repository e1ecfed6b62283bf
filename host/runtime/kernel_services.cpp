// The kernel area of the services table (accel/kernels.h): cast (FP8 with
// scale and amax), axpy, scale, fill, squared norm, clip scaling, fused
// AdamW / SGD steps, GEMM with scales and the FP8 delayed-scaling update, as
// ATen ops on the plugin's DLTensor views.
//
// Numerics: every kernel computes in fp32 and rounds once when it stores
// (ATen's conversions round to nearest even); FP8 stores saturate to
// +-accel_fp8_max and keep NaN. adamw_step is host/model/adamw_step.cpp's
// adamw_step_flat itself, so a plugin's optimizer step is bit-identical to
// the host's. Only E4M3FN and E5M2 are FP8 dtypes the kernels accept.
//
// On a CUDA device the FP8 cast is one fused kernel (cuda/fp8_cast.cu, the
// same codes and amax bit for bit) and an FP8 GEMM runs on the tensor cores
// (fp8_tensor_cores.h); the CPU keeps the exact emulation below.
//
// Streams: on CPU every kernel has completed when it returns, whatever the
// stream. On CUDA tensors the kernels run on ATen's current stream, the
// rank's compute stream; another stream is refused (UNSUPPORTED) until the
// CUDA stream layer lands. found_inf stays on the device in adamw_step on
// CUDA (the fused kernel skips); the other kernels read it on the host (a
// device sync on CUDA). Thread-safety: any thread; kernels share no state.
#include <ATen/ATen.h>
#include <accel/accel.h>

#include <atomic>
#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "host/runtime/fp8_tensor_cores.h"
#include "host/runtime/service_support.h"
#include "host/runtime/tensor_views.h"
#include "host/model/adamw_step.h"
#include "host/util/strformat.h"

namespace accel::runtime {
namespace {

// ---------------------------------------------------------------------------
// Argument checks
// ---------------------------------------------------------------------------

bool is_compute_float(at::ScalarType t) {
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf || t == at::kDouble;
}
bool is_kernel_fp8(at::ScalarType t) {
  return t == at::ScalarType::Float8_e4m3fn || t == at::ScalarType::Float8_e5m2;
}
double fp8_max_of(at::ScalarType t) { return t == at::ScalarType::Float8_e4m3fn ? 448.0 : 57344.0; }

std::string dtype_of(const at::Tensor& t) { return describe_dtype(to_dl_dtype(t.scalar_type())); }

// f32/bf16/f16/f64, and E4M3FN/E5M2 where `allow_fp8`; else UNSUPPORTED.
void require_float(const at::Tensor& t, const char* what, bool allow_fp8) {
  const at::ScalarType type = t.scalar_type();
  if (is_compute_float(type) || (allow_fp8 && is_kernel_fp8(type))) return;
  fail(ACCEL_ERROR_UNSUPPORTED, std::string(what) + " has dtype " + dtype_of(t) + ", which this kernel does not take");
}

void require_same_shape(const at::Tensor& a, const char* a_name, const at::Tensor& b, const char* b_name) {
  if (!a.sizes().equals(b.sizes())) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT, std::string(a_name) + " is " + describe_shape(a.sizes()) + " but " +
                                           b_name + " is " + describe_shape(b.sizes()));
  }
}

void require_same_device(const at::Tensor& a, const char* a_name, const at::Tensor& b, const char* b_name) {
  if (a.device() != b.device()) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT,
         std::string(a_name) + " is on " + a.device().str() + " but " + b_name + " on " + b.device().str());
  }
}

// A flat optimizer buffer: 1-D and contiguous, `numel` elements when given.
void require_flat(const at::Tensor& t, const char* what, std::optional<int64_t> numel = std::nullopt) {
  if (t.dim() != 1 || !t.is_contiguous()) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT,
         std::string(what) + " must be a flat 1-D contiguous buffer, got " + describe_shape(t.sizes()));
  }
  if (numel && t.numel() != *numel) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT,
         strformat("%s has %lld elements, expected %lld", what, static_cast<long long>(t.numel()),
                   static_cast<long long>(*numel)));
  }
}

void require_reserved_zero(uint32_t reserved) {
  if (reserved != 0) fail(ACCEL_ERROR_INVALID_ARGUMENT, "reserved must be 0");
}

// CPU kernels complete synchronously on any stream; CUDA ones run on the
// compute stream only (see the file comment).
void check_stream(AccelStream stream, const at::Tensor& any) {
  if (stream != nullptr && any.is_cuda()) {
    fail(ACCEL_ERROR_UNSUPPORTED, "kernels on CUDA tensors run on the compute stream (NULL) only in this host");
  }
}

// Stores an fp32 result into `out`, saturating for FP8 (NaN stays NaN).
void store(at::Tensor& out, const at::Tensor& value) {
  if (is_kernel_fp8(out.scalar_type())) {
    const double limit = fp8_max_of(out.scalar_type());
    out.copy_(value.clamp(-limit, limit));
  } else {
    out.copy_(value);
  }
}

// max |x| in fp32 as a 0-dim tensor (0 for an empty x); NaN propagates.
at::Tensor abs_max(const at::Tensor& x) {
  if (x.numel() == 0) return at::zeros({}, x.options().dtype(at::kFloat));
  return x.abs().max();
}

// `found_inf` set and non-zero: the optimizer step is skipped. A CPU
// rank's verdict is read where it lies (the host is the device: nothing to
// wait for); a CUDA rank's costs a synchronisation, which adamw_step's fused
// path avoids by handing it to the kernel.
bool step_skipped(const DLTensor* found_inf) {
  if (found_inf == nullptr) return false;
  const at::Tensor verdict = fp32_scalar(found_inf, "found_inf");
  if (verdict.is_cpu()) return *verdict.contiguous().data_ptr<float>() != 0.0f;
  return verdict.item<float>() != 0.0f;
}

at::Tensor scaled_grad(const at::Tensor& grad, const DLTensor* grad_scale) {
  at::Tensor g = grad.to(at::kFloat);
  if (grad_scale != nullptr) g = g * fp32_scalar(grad_scale, "grad_scale");
  return g;
}

void write_param_copy(const DLTensor* param_copy, const at::Tensor& param) {
  if (param_copy == nullptr) return;
  at::Tensor copy = to_aten(param_copy, "param_copy");
  require_float(copy, "param_copy", /*allow_fp8=*/false);
  require_flat(copy, "param_copy", param.numel());
  copy.copy_(param);
}

// ---------------------------------------------------------------------------
// Cast and elementwise
// ---------------------------------------------------------------------------

// A cast's output_transposed (1.9), checked: [cols, rows] of a 2-D
// output's dtype and device, contiguous (the GEMM reads it as a column-major
// view of the output).
at::Tensor transposed_output(const at::Tensor& input, const at::Tensor& output, const DLTensor* view) {
  at::Tensor transposed = to_aten(view, "output_transposed");
  if (input.dim() != 2 || transposed.dim() != 2 || transposed.size(0) != input.size(1) ||
      transposed.size(1) != input.size(0) || transposed.scalar_type() != output.scalar_type() ||
      !transposed.is_contiguous()) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT, "output_transposed must be a contiguous " + dtype_of(output) +
                                           " transpose of the 2-D input " + describe_shape(input.sizes()) + ", got " +
                                           dtype_of(transposed) + " " + describe_shape(transposed.sizes()));
  }
  require_same_device(input, "input", transposed, "output_transposed");
  return transposed;
}

AccelStatus cast(AccelHost* host, const AccelCastArgs* args) {
  return call_service("cast", [&] {
    ACCEL_REQUIRE_ARGS(args, AccelCastArgs, stream);
    context_of(host);
    require_reserved_zero(args->reserved);
    const at::Tensor input = to_aten(args->input, "input");
    at::Tensor output = to_aten(args->output, "output");
    require_float(input, "input", true);
    require_float(output, "output", true);
    require_same_shape(input, "input", output, "output");
    require_same_device(input, "input", output, "output");
    check_stream(args->stream, input);
    std::optional<at::Tensor> scale_cell, amax_cell;
    if (args->scale != nullptr) scale_cell = fp32_scalar(args->scale, "scale");
    if (args->amax != nullptr) amax_cell = fp32_scalar(args->amax, "amax");
    const bool accumulate = (args->flags & ACCEL_CAST_AMAX_ACCUMULATE) != 0;
    std::optional<at::Tensor> transposed;
    if (ACCEL_STRUCT_HAS_FIELD(args, AccelCastArgs, output_transposed) && args->output_transposed != nullptr) {
      transposed = transposed_output(input, output, args->output_transposed);
    }
    if (fused_fp8_cast(input, output, scale_cell, amax_cell, accumulate, transposed ? &*transposed : nullptr)) {
      return;  // a CUDA device's one pass
    }
    at::Tensor x = input.to(at::kFloat);
    if (amax_cell) {
      at::Tensor current = abs_max(x);
      if (accumulate) current = at::maximum(*amax_cell, current);
      amax_cell->copy_(current);
    }
    if (scale_cell) x = x * *scale_cell;
    store(output, x);
    if (transposed) transposed->copy_(output.t());
  });
}

AccelStatus axpy(AccelHost* host, const AccelAxpyArgs* args) {
  return call_service("axpy", [&] {
    ACCEL_REQUIRE_ARGS(args, AccelAxpyArgs, stream);
    context_of(host);
    const at::Tensor x = to_aten(args->x, "x");
    at::Tensor y = to_aten(args->y, "y");
    require_float(x, "x", false);
    require_float(y, "y", false);
    require_same_shape(x, "x", y, "y");
    require_same_device(x, "x", y, "y");
    check_stream(args->stream, y);
    const at::Tensor term = args->alpha_tensor != nullptr
                                ? x.to(at::kFloat) * fp32_scalar(args->alpha_tensor, "alpha_tensor")
                                : x.to(at::kFloat) * args->alpha;
    y.copy_(y.to(at::kFloat) + term);
  });
}

AccelStatus scale(AccelHost* host, const AccelScaleArgs* args) {
  return call_service("scale", [&] {
    ACCEL_REQUIRE_ARGS(args, AccelScaleArgs, stream);
    context_of(host);
    at::Tensor x = to_aten(args->x, "x");
    require_float(x, "x", false);
    check_stream(args->stream, x);
    if (args->alpha_tensor != nullptr) {
      x.copy_(x.to(at::kFloat) * fp32_scalar(args->alpha_tensor, "alpha_tensor"));
    } else {
      x.copy_(x.to(at::kFloat) * args->alpha);
    }
  });
}

AccelStatus fill(AccelHost* host, const AccelFillArgs* args) {
  return call_service("fill", [&] {
    ACCEL_REQUIRE_ARGS(args, AccelFillArgs, stream);
    context_of(host);
    at::Tensor x = to_aten(args->x, "x");
    check_stream(args->stream, x);
    if (is_kernel_fp8(x.scalar_type())) {
      store(x, at::full(x.sizes(), args->value, x.options().dtype(at::kFloat)));
    } else {
      x.fill_(args->value);
    }
  });
}

// ---------------------------------------------------------------------------
// Norms
// ---------------------------------------------------------------------------

AccelStatus squared_norm(AccelHost* host, const AccelSquaredNormArgs* args) {
  return call_service("squared_norm", [&] {
    ACCEL_REQUIRE_ARGS(args, AccelSquaredNormArgs, stream);
    context_of(host);
    if (args->num_inputs < 0 || (args->num_inputs > 0 && args->inputs == nullptr)) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, strformat("num_inputs %d with inputs %s", args->num_inputs,
                                                   args->inputs == nullptr ? "NULL" : "set"));
    }
    at::Tensor output = fp32_scalar(args->output, "output");
    check_stream(args->stream, output);
    at::Tensor total = at::zeros({}, output.options());
    for (int32_t i = 0; i < args->num_inputs; ++i) {
      const std::string what = "inputs[" + std::to_string(i) + "]";
      const at::Tensor x = to_aten(args->inputs[i], what.c_str());
      require_float(x, what.c_str(), true);
      require_same_device(x, what.c_str(), output, "output");
      total = total + x.to(at::kFloat).square().sum();
    }
    if ((args->flags & ACCEL_NORM_ACCUMULATE) != 0) total = total + output;
    output.copy_(total);
  });
}

AccelStatus clip_scale(AccelHost* host, const AccelClipScaleArgs* args) {
  return call_service("clip_scale", [&] {
    ACCEL_REQUIRE_ARGS(args, AccelClipScaleArgs, stream);
    context_of(host);
    require_reserved_zero(args->reserved);
    if (args->num_tensors < 0 || (args->num_tensors > 0 && args->tensors == nullptr)) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, strformat("num_tensors %d with tensors %s", args->num_tensors,
                                                   args->tensors == nullptr ? "NULL" : "set"));
    }
    if (!(args->max_norm > 0.0)) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, strformat("max_norm must be > 0, got %g", args->max_norm));
    }
    if (!(args->eps >= 0.0)) fail(ACCEL_ERROR_INVALID_ARGUMENT, strformat("eps must be >= 0, got %g", args->eps));
    const double eps = args->eps == 0.0 ? 1e-6 : args->eps;
    const at::Tensor squared = fp32_scalar(args->total_squared_norm, "total_squared_norm");
    check_stream(args->stream, squared);
    const at::Tensor norm = squared.sqrt();
    if (args->total_norm != nullptr) fp32_scalar(args->total_norm, "total_norm").copy_(norm);
    if (std::isinf(args->max_norm)) return;
    // torch.nn.utils.clip_grad_norm_: clamp(max_norm / (norm + eps), max=1).
    const at::Tensor coef = (args->max_norm / (norm + eps)).clamp_max(1.0);
    for (int32_t i = 0; i < args->num_tensors; ++i) {
      const std::string what = "tensors[" + std::to_string(i) + "]";
      at::Tensor t = to_aten(args->tensors[i], what.c_str());
      require_float(t, what.c_str(), false);
      require_same_device(t, what.c_str(), squared, "total_squared_norm");
      if (t.scalar_type() == at::kFloat) {
        t.mul_(coef);
      } else {
        t.copy_(t.to(at::kFloat) * coef);  // the coefficient stays fp32
      }
    }
  });
}

// ---------------------------------------------------------------------------
// Optimizers
// ---------------------------------------------------------------------------

// Both AdamW services' operands: an fp32 flat master and its flat gradient
// of the same length.
std::pair<at::Tensor, at::Tensor> adamw_param_and_grad(const DLTensor* param_view, const DLTensor* grad_view) {
  at::Tensor param = to_aten(param_view, "param");
  if (param.scalar_type() != at::kFloat) {
    fail(ACCEL_ERROR_UNSUPPORTED, "param has dtype " + dtype_of(param) + "; AdamW steps fp32 masters only");
  }
  require_flat(param, "param");
  at::Tensor grad = to_aten(grad_view, "grad");
  require_float(grad, "grad", false);
  require_flat(grad, "grad", param.numel());
  return {param, grad};
}

void require_adamw_schedule(int64_t step, double beta1, double beta2) {
  if (step < 1) fail(ACCEL_ERROR_INVALID_ARGUMENT, strformat("step must be >= 1, got %lld", static_cast<long long>(step)));
  if (!(beta1 >= 0.0 && beta1 < 1.0 && beta2 >= 0.0 && beta2 < 1.0)) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT, strformat("betas must lie in [0, 1), got %g, %g", beta1, beta2));
  }
}

AccelStatus adamw_step(AccelHost* host, const AccelAdamWArgs* args) {
  return call_service("adamw_step", [&] {
    ACCEL_REQUIRE_ARGS(args, AccelAdamWArgs, stream);
    context_of(host);
    auto [param, grad] = adamw_param_and_grad(args->param, args->grad);
    at::Tensor exp_avg = to_aten(args->exp_avg, "exp_avg");
    at::Tensor exp_avg_sq = to_aten(args->exp_avg_sq, "exp_avg_sq");
    for (const auto& [t, what] : {std::pair{&exp_avg, "exp_avg"}, std::pair{&exp_avg_sq, "exp_avg_sq"}}) {
      if (t->scalar_type() != at::kFloat) fail(ACCEL_ERROR_UNSUPPORTED, std::string(what) + " must be fp32");
      require_flat(*t, what, param.numel());
      require_same_device(*t, what, param, "param");
    }
    require_same_device(grad, "grad", param, "param");
    check_stream(args->stream, param);
    require_adamw_schedule(args->step, args->beta1, args->beta2);
    const model::AdamWHyper hyper{args->lr, args->beta1, args->beta2, args->eps, args->weight_decay};
    // Decoupled weight decay over the whole view: callers give ranges without
    // decay their own call (accel/kernels.h).
    if (param.is_cuda()) {
      // The fused kernel (adamw_step_flat's CUDA path) skips on the device:
      // queuing the step reads nothing back. A skipped step's param_copy
      // rewrites the unchanged values.
      const at::Tensor found_inf =
          args->found_inf != nullptr ? fp32_scalar(args->found_inf, "found_inf") : at::Tensor();
      model::adamw_step_fused_flat(param, scaled_grad(grad, args->grad_scale), exp_avg, exp_avg_sq, param.numel(),
                                   args->step, hyper, found_inf);
      write_param_copy(args->param_copy, param);
      return;
    }
    if (step_skipped(args->found_inf)) return;
    model::adamw_step_flat(param, scaled_grad(grad, args->grad_scale), exp_avg, exp_avg_sq, param.numel(),
                           args->step, hyper);
    write_param_copy(args->param_copy, param);
  });
}

// MS-AMP's two-pass AdamW with scaled moments (accel/kernels.h, 1.8): both
// passes dequantise the stored moments and run adamw_moments_flat, so STORE
// recomputes UPDATE's new moments bit for bit.
AccelStatus adamw_step_scaled(AccelHost* host, const AccelScaledAdamWArgs* args) {
  return call_service("adamw_step_scaled", [&] {
    ACCEL_REQUIRE_ARGS(args, AccelScaledAdamWArgs, stream);
    context_of(host);
    require_reserved_zero(args->reserved);
    if (args->pass != ACCEL_SCALED_ADAMW_UPDATE && args->pass != ACCEL_SCALED_ADAMW_STORE) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, strformat("unknown pass %d", static_cast<int>(args->pass)));
    }
    auto [param, grad] = adamw_param_and_grad(args->param, args->grad);
    require_same_device(grad, "grad", param, "param");
    at::Tensor exp_avg = to_aten(args->exp_avg, "exp_avg");
    at::Tensor exp_avg_sq = to_aten(args->exp_avg_sq, "exp_avg_sq");
    if (exp_avg.scalar_type() != at::kFloat && exp_avg.scalar_type() != at::ScalarType::Float8_e4m3fn) {
      fail(ACCEL_ERROR_UNSUPPORTED, "exp_avg has dtype " + dtype_of(exp_avg) + "; fp32 or E4M3FN only");
    }
    if (exp_avg_sq.scalar_type() != at::kFloat && exp_avg_sq.scalar_type() != at::kHalf) {
      fail(ACCEL_ERROR_UNSUPPORTED, "exp_avg_sq has dtype " + dtype_of(exp_avg_sq) + "; fp32 or f16 only");
    }
    for (const auto& [t, what] : {std::pair{&exp_avg, "exp_avg"}, std::pair{&exp_avg_sq, "exp_avg_sq"}}) {
      require_flat(*t, what, param.numel());
      require_same_device(*t, what, param, "param");
    }
    check_stream(args->stream, param);
    require_adamw_schedule(args->step, args->beta1, args->beta2);
    if (step_skipped(args->found_inf)) return;
    const auto scalar = [](const DLTensor* t, const char* what) {
      return t == nullptr ? 1.0f : fp32_scalar(t, what).item<float>();
    };
    const at::Tensor g = scaled_grad(grad, args->grad_scale);
    const model::AdamWHyper hyper{args->lr, args->beta1, args->beta2, args->eps, args->weight_decay};
    at::Tensor m = model::dequantize_moment(exp_avg, scalar(args->exp_avg_scale, "exp_avg_scale"));
    at::Tensor v = model::dequantize_moment(exp_avg_sq, scalar(args->exp_avg_sq_scale, "exp_avg_sq_scale"));
    model::adamw_moments_flat(g, m, v, hyper);
    if (args->pass == ACCEL_SCALED_ADAMW_UPDATE) {
      model::adamw_param_flat(param, m, v, param.numel(), args->step, hyper);
      write_param_copy(args->param_copy, param);
      for (const auto& [amax_args, values, what] :
           {std::tuple{args->exp_avg_amax, &m, "exp_avg_amax"}, std::tuple{args->exp_avg_sq_amax, &v, "exp_avg_sq_amax"}}) {
        if (amax_args == nullptr) continue;
        at::Tensor amax = fp32_scalar(amax_args, what);
        amax.copy_(at::maximum(amax, abs_max(*values).to(amax.device())));
      }
      return;
    }
    model::quantize_moment(m, scalar(args->exp_avg_new_scale, "exp_avg_new_scale"), exp_avg);
    model::quantize_moment(v, scalar(args->exp_avg_sq_new_scale, "exp_avg_sq_new_scale"), exp_avg_sq);
  });
}

AccelStatus sgd_step(AccelHost* host, const AccelSgdArgs* args) {
  return call_service("sgd_step", [&] {
    ACCEL_REQUIRE_ARGS(args, AccelSgdArgs, stream);
    context_of(host);
    require_reserved_zero(args->reserved);
    at::Tensor param = to_aten(args->param, "param");
    if (param.scalar_type() != at::kFloat) {
      fail(ACCEL_ERROR_UNSUPPORTED, "param has dtype " + dtype_of(param) + "; SGD steps fp32 parameters only");
    }
    require_flat(param, "param");
    const at::Tensor grad = to_aten(args->grad, "grad");
    require_float(grad, "grad", false);
    require_flat(grad, "grad", param.numel());
    require_same_device(grad, "grad", param, "param");
    check_stream(args->stream, param);
    if ((args->momentum_buffer == nullptr) != (args->momentum == 0.0)) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, "momentum_buffer must be NULL exactly when momentum is 0");
    }
    const bool nesterov = (args->flags & ACCEL_SGD_NESTEROV) != 0;
    if (nesterov && (args->momentum <= 0.0 || args->dampening != 0.0)) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, "Nesterov momentum requires momentum > 0 and dampening 0");
    }
    if (args->step < 1) fail(ACCEL_ERROR_INVALID_ARGUMENT, strformat("step must be >= 1, got %lld", static_cast<long long>(args->step)));
    if (step_skipped(args->found_inf)) return;
    // torch.optim.SGD's single-tensor step.
    at::Tensor d_p = scaled_grad(grad, args->grad_scale);
    if (args->weight_decay != 0.0) d_p = d_p.add(param, args->weight_decay);
    if (args->momentum != 0.0) {
      at::Tensor buf = to_aten(args->momentum_buffer, "momentum_buffer");
      if (buf.scalar_type() != at::kFloat) fail(ACCEL_ERROR_UNSUPPORTED, "momentum_buffer must be fp32");
      require_flat(buf, "momentum_buffer", param.numel());
      if (args->step == 1) {
        buf.copy_(d_p);
      } else {
        buf.mul_(args->momentum).add_(d_p, 1.0 - args->dampening);
      }
      d_p = nesterov ? d_p.add(buf, args->momentum) : buf;
    }
    param.add_(d_p, -args->lr);
    write_param_copy(args->param_copy, param);
  });
}

// ---------------------------------------------------------------------------
// GEMM and FP8 scaling
// ---------------------------------------------------------------------------

// The FP8 operand pairs of accel/kernels.h; other pairs with FP8 in them are
// unsupported, as is mixing FP8 with a wider float.
void check_gemm_dtypes(const at::Tensor& a, const at::Tensor& b) {
  const bool a8 = is_kernel_fp8(a.scalar_type());
  const bool b8 = is_kernel_fp8(b.scalar_type());
  const bool both_e5m2 = a.scalar_type() == at::ScalarType::Float8_e5m2 && b.scalar_type() == at::ScalarType::Float8_e5m2;
  const bool ok = (a8 && b8 && !both_e5m2) ||
                  (!a8 && !b8 && is_compute_float(a.scalar_type()) && is_compute_float(b.scalar_type()));
  if (!ok) {
    fail(ACCEL_ERROR_UNSUPPORTED,
         "gemm of " + dtype_of(a) + " x " + dtype_of(b) + " is not supported (E4M3 x E4M3 and E4M3 x E5M2 are)");
  }
}

// The GEMM's bias as a tensor, checked to be a float [n]; empty when NULL.
std::optional<at::Tensor> gemm_bias(const DLTensor* view, int64_t n) {
  if (view == nullptr) return std::nullopt;
  at::Tensor bias = to_aten(view, "bias");
  require_float(bias, "bias", false);
  if (bias.dim() != 1 || bias.size(0) != n) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT,
         strformat("bias must be [%lld], got ", static_cast<long long>(n)) + describe_shape(bias.sizes()));
  }
  return bias;
}

// A CUDA device's FP8 GEMM: the tensor cores through scaled_gemm, then
// alpha, accumulation, amax and output scale as the emulation below applies
// them (those are rare: the fp8 plugin uses none but accumulation).
void gemm_on_fp8_tensor_cores(const AccelGemmArgs& args, const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  require_fp8_tensor_cores(out.device());
  const bool trans_a = (args.flags & ACCEL_GEMM_TRANS_A) != 0;
  const bool trans_b = (args.flags & ACCEL_GEMM_TRANS_B) != 0;
  const int64_t m = trans_a ? a.size(1) : a.size(0), k = trans_a ? a.size(0) : a.size(1);
  const int64_t kb = trans_b ? b.size(1) : b.size(0), n = trans_b ? b.size(0) : b.size(1);
  if (kb != k || out.size(0) != m || out.size(1) != n) {
    fail(ACCEL_ERROR_INVALID_ARGUMENT, strformat("op(a) [%lld, %lld] x op(b) [%lld, %lld] does not give out ",
                                                 static_cast<long long>(m), static_cast<long long>(k),
                                                 static_cast<long long>(kb), static_cast<long long>(n)) +
                                           describe_shape(out.sizes()));
  }
  // A missing scale is 1 (made only then: the fp8 plugin passes both).
  const auto scale_or_one = [&](const DLTensor* scale, const char* what) {
    return scale != nullptr ? fp32_scalar(scale, what) : at::ones({}, out.options().dtype(at::kFloat));
  };
  const at::Tensor scale_a = scale_or_one(args.scale_a, "scale_a");
  const at::Tensor scale_b = scale_or_one(args.scale_b, "scale_b");
  const bool fast = (args.flags & ACCEL_GEMM_FP8_FAST_ACCUMULATE) != 0;
  const std::optional<at::Tensor> bias = gemm_bias(args.bias, n);
  const bool accumulate = (args.flags & ACCEL_GEMM_ACCUMULATE) != 0;
  if (accumulate && is_kernel_fp8(out.scalar_type())) {
    fail(ACCEL_ERROR_UNSUPPORTED, "ACCEL_GEMM_ACCUMULATE into an FP8 output is not supported");
  }
  const bool plain = args.alpha == 1.0 && !accumulate && args.amax_out == nullptr && args.scale_out == nullptr &&
                     !is_kernel_fp8(out.scalar_type());
  if (plain) {
    scaled_gemm(a, trans_a, b, trans_b, scale_a, scale_b, bias, out.scalar_type(), &out, fast);
    return;
  }
  at::Tensor result = scaled_gemm(a, trans_a, b, trans_b, scale_a, scale_b, std::nullopt, at::kFloat, nullptr, fast);
  if (args.alpha != 1.0) result.mul_(args.alpha);
  if (bias) result.add_(bias->to(at::kFloat));
  if (accumulate && out.scalar_type() == at::kFloat && args.amax_out == nullptr && args.scale_out == nullptr) {
    out.add_(result);  // wgrad into an fp32 gradient: one pass
    return;
  }
  if (accumulate) result.add_(out);
  if (args.amax_out != nullptr) fp32_scalar(args.amax_out, "amax_out").copy_(abs_max(result));
  if (args.scale_out != nullptr) result = result * fp32_scalar(args.scale_out, "scale_out");
  store(out, result);
}

// A CUDA device's bf16 x bf16 (or f16 x f16) GEMM into an fp32 out, plain
// or accumulating (the fp8 plugin's bias gradient, its overridden dgrad and
// wgrad): cuBLAS reads the 16-bit operands and accumulates in fp32
// (at::mm with out_dtype), where the general path below would first copy
// both operands to fp32 (a [tokens, out] gradient read once, written and
// read again at twice the width). Returns false where it does not apply, or
// where this torch refuses the 16-bit-in, fp32-out product (then the
// general path serves, from the next call on without trying).
bool gemm_16bit_into_fp32(const AccelGemmArgs& args, const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  static std::atomic<bool> refused{false};
  const bool sixteen = (a.scalar_type() == at::kBFloat16 || a.scalar_type() == at::kHalf) &&
                       b.scalar_type() == a.scalar_type();
  if (!out.is_cuda() || !sixteen || out.scalar_type() != at::kFloat || args.scale_a != nullptr ||
      args.scale_b != nullptr || args.scale_out != nullptr || args.amax_out != nullptr || args.bias != nullptr ||
      args.alpha != 1.0 || refused.load(std::memory_order_relaxed)) {
    return false;
  }
  const at::Tensor op_a = (args.flags & ACCEL_GEMM_TRANS_A) != 0 ? a.t() : a;
  const at::Tensor op_b = (args.flags & ACCEL_GEMM_TRANS_B) != 0 ? b.t() : b;
  if (op_a.size(1) != op_b.size(0) || out.size(0) != op_a.size(0) || out.size(1) != op_b.size(1)) return false;
  at::Tensor product;
  try {
    product = at::mm(op_a, op_b, at::kFloat);
  } catch (const c10::Error&) {
    refused.store(true, std::memory_order_relaxed);
    return false;
  }
  if ((args.flags & ACCEL_GEMM_ACCUMULATE) != 0) {
    out.add_(product);
  } else {
    out.copy_(product);
  }
  return true;
}

AccelStatus gemm(AccelHost* host, const AccelGemmArgs* args) {
  return call_service("gemm", [&] {
    ACCEL_REQUIRE_ARGS(args, AccelGemmArgs, stream);
    context_of(host);
    require_reserved_zero(args->reserved);
    const at::Tensor a = to_aten(args->a, "a");
    const at::Tensor b = to_aten(args->b, "b");
    at::Tensor out = to_aten(args->out, "out");
    if (a.dim() != 2 || b.dim() != 2 || out.dim() != 2) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, "a, b and out must be 2-D, got " + describe_shape(a.sizes()) + ", " +
                                             describe_shape(b.sizes()) + ", " + describe_shape(out.sizes()));
    }
    check_gemm_dtypes(a, b);
    require_float(out, "out", true);
    require_same_device(a, "a", out, "out");
    require_same_device(b, "b", out, "out");
    check_stream(args->stream, out);
    if (is_kernel_fp8(a.scalar_type()) && out.is_cuda()) {
      gemm_on_fp8_tensor_cores(*args, a, b, out);
      return;
    }
    if (gemm_16bit_into_fp32(*args, a, b, out)) return;
    at::Tensor op_a = a.to(at::kFloat);
    at::Tensor op_b = b.to(at::kFloat);
    if ((args->flags & ACCEL_GEMM_TRANS_A) != 0) op_a = op_a.t();
    if ((args->flags & ACCEL_GEMM_TRANS_B) != 0) op_b = op_b.t();
    const int64_t m = op_a.size(0), k = op_a.size(1), n = op_b.size(1);
    if (op_b.size(0) != k || out.size(0) != m || out.size(1) != n) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, "op(a) " + describe_shape(op_a.sizes()) + " x op(b) " +
                                             describe_shape(op_b.sizes()) + " does not give out " +
                                             describe_shape(out.sizes()));
    }
    if (args->scale_a != nullptr) op_a = op_a * fp32_scalar(args->scale_a, "scale_a");
    if (args->scale_b != nullptr) op_b = op_b * fp32_scalar(args->scale_b, "scale_b");
    at::Tensor result = at::matmul(op_a, op_b);
    if (args->alpha != 1.0) result.mul_(args->alpha);
    if (const std::optional<at::Tensor> bias = gemm_bias(args->bias, n)) result.add_(bias->to(at::kFloat));
    if ((args->flags & ACCEL_GEMM_ACCUMULATE) != 0) {
      if (is_kernel_fp8(out.scalar_type())) {
        fail(ACCEL_ERROR_UNSUPPORTED, "ACCEL_GEMM_ACCUMULATE into an FP8 output is not supported");
      }
      result.add_(out.to(at::kFloat));
    }
    if (args->amax_out != nullptr) fp32_scalar(args->amax_out, "amax_out").copy_(abs_max(result));
    if (args->scale_out != nullptr) result = result * fp32_scalar(args->scale_out, "scale_out");
    store(out, result);
  });
}

AccelStatus fp8_scale_update(AccelHost* host, const AccelFp8ScaleUpdateArgs* args) {
  return call_service("fp8_scale_update", [&] {
    ACCEL_REQUIRE_ARGS(args, AccelFp8ScaleUpdateArgs, stream);
    context_of(host);
    at::Tensor history = to_aten(args->amax_history, "amax_history");
    if (history.scalar_type() != at::kFloat || history.dim() != 2 || history.size(0) < 1) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT,
           "amax_history must be fp32 [history_len >= 1, n], got " + dtype_of(history) + " " +
               describe_shape(history.sizes()));
    }
    const int64_t n = history.size(1);
    at::Tensor scale = to_aten(args->scale, "scale");
    if (scale.scalar_type() != at::kFloat || scale.dim() != 1 || scale.size(0) != n) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, strformat("scale must be fp32 [%lld], got ", static_cast<long long>(n)) +
                                             dtype_of(scale) + " " + describe_shape(scale.sizes()));
    }
    std::optional<at::Tensor> scale_inv;
    if (args->scale_inv != nullptr) {
      scale_inv = to_aten(args->scale_inv, "scale_inv");
      if (scale_inv->scalar_type() != at::kFloat || !scale_inv->sizes().equals(scale.sizes())) {
        fail(ACCEL_ERROR_INVALID_ARGUMENT, "scale_inv must be fp32 like scale, got " + dtype_of(*scale_inv) +
                                               " " + describe_shape(scale_inv->sizes()));
      }
    }
    if (!accel_dtype_is_fp8(args->fp8_dtype)) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, "fp8_dtype must be E4M3FN or E5M2, got " + describe_dtype(args->fp8_dtype));
    }
    if (args->algo != ACCEL_AMAX_MOST_RECENT && args->algo != ACCEL_AMAX_MAX) {
      fail(ACCEL_ERROR_INVALID_ARGUMENT, strformat("unknown amax algo %d", static_cast<int>(args->algo)));
    }
    require_same_device(scale, "scale", history, "amax_history");
    check_stream(args->stream, history);

    const at::Tensor amax = args->algo == ACCEL_AMAX_MOST_RECENT ? history.select(0, 0) : history.amax(0);
    const double target = accel_fp8_max(args->fp8_dtype) / std::ldexp(1.0, args->margin);
    const at::Tensor proposed = target / amax;
    // Keep the old scale where amax is zero, inf or NaN (and where the new
    // one would not be a finite positive number, e.g. amax tiny).
    const at::Tensor usable = at::isfinite(amax) & (amax > 0) & at::isfinite(proposed) & (proposed > 0);
    const at::Tensor updated = at::where(usable, proposed, scale);
    scale.copy_(updated);
    if (scale_inv) scale_inv->copy_(updated.reciprocal());
    if ((args->flags & ACCEL_FP8_ROLL_HISTORY) != 0) {
      const int64_t rows = history.size(0);
      if (rows > 1) history.narrow(0, 1, rows - 1).copy_(history.narrow(0, 0, rows - 1).clone());
      history.select(0, 0).zero_();
    }
  });
}

}  // namespace

const AccelKernelServices* kernel_services_table() {
  static const AccelKernelServices table{sizeof(AccelKernelServices),
                                         nullptr,
                                         &cast,
                                         &axpy,
                                         &scale,
                                         &fill,
                                         &squared_norm,
                                         &clip_scale,
                                         &adamw_step,
                                         &sgd_step,
                                         &gemm,
                                         &fp8_scale_update,
                                         &adamw_step_scaled};
  return &table;
}

}  // namespace accel::runtime
