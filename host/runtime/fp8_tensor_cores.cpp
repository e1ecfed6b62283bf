// FP8 on a CUDA device (see fp8_tensor_cores.h).
#include "host/runtime/fp8_tensor_cores.h"

#include <ATen/DeviceAccelerator.h>
#include <c10/core/DeviceGuard.h>
#include <accel/accel.h>

#include <cstdint>
#include <mutex>
#include <set>
#include <string>

#include "host/runtime/service_support.h"
#include "host/util/strformat.h"

#if defined(ACCEL_HAVE_CUDA_KERNELS)
#include "host/runtime/cuda/fp8_cast_kernel.h"
#endif

namespace accel::runtime {
namespace {

constexpr int64_t kAlign = 16;  // cuBLASLt's FP8 GEMM: k and n multiples of 16

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

// `t` [rows, cols] zero-padded to [rows_to, cols_to] (itself when it fits).
at::Tensor padded(const at::Tensor& t, int64_t rows_to, int64_t cols_to) {
  if (t.size(0) == rows_to && t.size(1) == cols_to) return t;
  at::Tensor out = at::zeros({rows_to, cols_to}, t.options());
  out.narrow(0, 0, t.size(0)).narrow(1, 0, t.size(1)).copy_(t);
  return out;
}

bool column_major(const at::Tensor& t) { return t.stride(0) == 1 && t.stride(1) == t.size(0); }

// cuBLASLt refuses (CUBLAS_STATUS_NOT_SUPPORTED) a per-tensor scale whose
// pointer is not 16-byte aligned: measured on an H100 (CUDA 13, torch
// 2.11), where a scale one or two floats into its buffer failed and one at
// its start ran. The fp8 plugin's scales are cells of per-linear arrays, so
// a misaligned one is copied (4 bytes, on the device) into its own tensor.
at::Tensor aligned_scale(const at::Tensor& scale) {
  return reinterpret_cast<uintptr_t>(scale.data_ptr()) % 16 == 0 ? scale : scale.clone();
}

}  // namespace

bool fused_fp8_cast(const at::Tensor& input, at::Tensor& output, const std::optional<at::Tensor>& scale,
                    const std::optional<at::Tensor>& amax, bool accumulate_amax, at::Tensor* transposed) {
#if defined(ACCEL_HAVE_CUDA_KERNELS)
  using cuda_kernels::CastSource;
  using cuda_kernels::CastTarget;
  if (!input.is_cuda() || !input.is_contiguous() || !output.is_contiguous()) return false;
  if (transposed != nullptr && (input.dim() != 2 || !transposed->is_contiguous() ||
                                transposed->scalar_type() != output.scalar_type() ||
                                transposed->device() != input.device())) {
    return false;
  }
  CastSource source;
  switch (input.scalar_type()) {
    case at::kFloat: source = CastSource::f32; break;
    case at::kBFloat16: source = CastSource::bf16; break;
    case at::kHalf: source = CastSource::f16; break;
    default: return false;
  }
  CastTarget target;
  switch (output.scalar_type()) {
    case at::ScalarType::Float8_e4m3fn: target = CastTarget::e4m3fn; break;
    case at::ScalarType::Float8_e5m2: target = CastTarget::e5m2; break;
    default: return false;
  }
  // The kernel reads the scale and writes the amax through device pointers.
  for (const std::optional<at::Tensor>* cell : {&scale, &amax}) {
    if (*cell && ((*cell)->device() != input.device() || !(*cell)->is_contiguous())) return false;
  }
  if (amax && !accumulate_amax) amax->zero_();  // queued before the kernel, on the same stream
  const c10::DeviceGuard on_device(input.device());  // the kernel launches on the current device
  void* stream = at::accelerator::getCurrentStream(input.device().index()).native_handle();
  float* scale_ptr = scale ? scale->data_ptr<float>() : nullptr;
  float* amax_ptr = amax ? amax->data_ptr<float>() : nullptr;
  const char* error =
      transposed != nullptr
          ? cuda_kernels::launch_fp8_cast_transpose(input.data_ptr(), source, output.data_ptr(), transposed->data_ptr(),
                                                    target, input.size(0), input.size(1), scale_ptr, amax_ptr, stream)
          : cuda_kernels::launch_fp8_cast(input.data_ptr(), source, output.data_ptr(), target, input.numel(),
                                          scale_ptr, amax_ptr, stream);
  if (error != nullptr) fail(ACCEL_ERROR_INTERNAL, std::string("fp8 cast kernel: ") + error);
  return true;
#else
  (void)input, (void)output, (void)scale, (void)amax, (void)accumulate_amax, (void)transposed;
  return false;
#endif
}

at::Tensor scaled_gemm(const at::Tensor& a, bool trans_a, const at::Tensor& b, bool trans_b, const at::Tensor& scale_a,
                       const at::Tensor& scale_b, const std::optional<at::Tensor>& bias, at::ScalarType out_dtype,
                       at::Tensor* into, bool fast_accumulate) {
  at::Tensor first = trans_a ? a.t() : a;    // [m, k], wanted row-major
  at::Tensor second = trans_b ? b.t() : b;   // [k, n], wanted column-major
  if (!first.is_contiguous()) first = first.contiguous();
  if (!column_major(second)) second = second.t().contiguous().t();
  const int64_t m = first.size(0), k = first.size(1), n = second.size(1);
  const int64_t k16 = round_up(k, kAlign), n16 = round_up(n, kAlign);
  if (k16 != k) first = padded(first, m, k16);
  if (k16 != k || n16 != n) second = padded(second.t(), n16, k16).t();  // padded row-major [n, k], viewed [k, n]
  // A 16-bit output takes the bias in cuBLASLt's epilogue, in the output's
  // type (as autocast's linear rounds an fp32 bias to bf16 first); an fp32
  // output has it added after, in fp32.
  const bool epilogue_bias = bias && n16 == n && (out_dtype == at::kBFloat16 || out_dtype == at::kHalf);
  const at::ScalarType product_dtype = bias && !epilogue_bias ? at::kFloat : out_dtype;
  const at::Tensor sa = aligned_scale(scale_a), sb = aligned_scale(scale_b);
  const std::optional<at::Tensor> fused_bias =
      epilogue_bias ? std::optional<at::Tensor>(bias->to(out_dtype)) : std::optional<at::Tensor>{};
  if (into != nullptr && n16 == n && !(bias && !epilogue_bias) && into->scalar_type() == out_dtype &&
      into->is_contiguous() && into->size(0) == m && into->size(1) == n) {
    // Straight into the caller's tensor: no copy of the output.
    at::_scaled_mm_out(*into, first, second, sa, sb, fused_bias, std::nullopt, out_dtype,
                       /*use_fast_accum=*/fast_accumulate);
    return *into;
  }
  at::Tensor result = at::_scaled_mm(first, second, sa, sb, fused_bias, std::nullopt, product_dtype,
                                     /*use_fast_accum=*/fast_accumulate);
  if (n16 != n) result = result.narrow(1, 0, n);
  if (bias && !epilogue_bias) result = (result + bias->to(at::kFloat)).to(out_dtype);
  if (into != nullptr) return into->copy_(result);
  return result;
}

std::string fp8_tensor_core_refusal(int capability, const std::string& device) {
  if (capability >= 89) return {};
  return strformat("FP8 GEMMs need FP8 tensor cores (compute capability 8.9 or newer: Ada, Hopper, Blackwell); %s "
                   "has %d.%d, and FP8 is not emulated on a GPU: leave --plugin fp8 out there",
                   device.c_str(), capability / 10, capability % 10);
}

void require_fp8_tensor_cores(const at::Device& device) {
#if defined(ACCEL_HAVE_CUDA_KERNELS)
  if (!device.is_cuda()) return;
  static std::mutex mutex;
  static std::set<int> checked;
  const std::lock_guard<std::mutex> lock(mutex);
  if (checked.count(device.index()) != 0) return;
  const char* error = nullptr;
  const int capability = cuda_kernels::compute_capability(device.index(), &error);
  if (capability < 0) fail(ACCEL_ERROR_INTERNAL, std::string("cannot read the GPU's compute capability: ") + error);
  const std::string refusal = fp8_tensor_core_refusal(capability, device.str());
  if (!refusal.empty()) fail(ACCEL_ERROR_UNSUPPORTED, refusal);
  checked.insert(device.index());
#else
  (void)device;
#endif
}

}  // namespace accel::runtime
