// fp8_tensor_cores.h — FP8 on a CUDA device, for the kernel services
// (kernel_services.cpp): the fused cast (cuda/fp8_cast.cu) and the GEMM on
// FP8 tensor cores (at::_scaled_mm, cuBLASLt). The CPU keeps the exact
// emulation in kernel_services.cpp; these are its device twins and compute
// the same function (the cast bit for bit; the GEMM within fp32
// accumulation order).
//
// Thread-safety: any thread; work is queued on ATen's current stream of the
// tensors' device, the rank's compute stream. Nothing here reads a device
// value on the host.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>

namespace accel::runtime {

// The fused cast when it applies (a CUDA tensor, contiguous f32/bf16/f16 in,
// contiguous E4M3FN/E5M2 out, the kernels built): one pass that stores
// x * scale saturated and folds max |x| into `amax` (overwritten unless
// `accumulate_amax`). With `transposed` (a contiguous [cols, rows] tensor
// of output's dtype, for a 2-D input), the same pass also stores the codes
// transposed. Returns false, having done nothing, when it does not apply.
bool fused_fp8_cast(const at::Tensor& input, at::Tensor& output, const std::optional<at::Tensor>& scale,
                    const std::optional<at::Tensor>& amax, bool accumulate_amax,
                    at::Tensor* transposed = nullptr);

// op(a) op(b) * scale_a * scale_b (+ bias), fp32 accumulation, as
// `out_dtype`, on FP8 operands (E4M3 x E4M3, E4M3 x E5M2, E5M2 x E4M3)
// through at::_scaled_mm. Arranges what cuBLASLt's FP8 GEMM requires: the
// first operand row-major, the second column-major (an FP8 transpose copy
// where they are not), inner and output extents multiples of 16 (zero
// padding, cut off again). Scales are fp32 scalars on the operands' device.
// A bias joins a bf16/f16 output in the GEMM's epilogue, rounded to that
// type first (autocast's linear does the same); an fp32 output adds it in
// fp32.
// With `into` set, the product is written there (directly when it is
// contiguous, of out_dtype and needs no padding) and returned. Runs on CPU
// tensors too (ATen's CPU _scaled_mm), which is how its layout handling is
// tested without a GPU.
// `fast_accumulate`: cuBLASLt's fast accumulation (no periodic promotion to
// fp32; ACCEL_GEMM_FP8_FAST_ACCUMULATE).
at::Tensor scaled_gemm(const at::Tensor& a, bool trans_a, const at::Tensor& b, bool trans_b, const at::Tensor& scale_a,
                       const at::Tensor& scale_b, const std::optional<at::Tensor>& bias, at::ScalarType out_dtype,
                       at::Tensor* into = nullptr, bool fast_accumulate = false);

// Throws ServiceError(UNSUPPORTED) with one line when `device` is a GPU
// without FP8 tensor cores (compute capability below 8.9): an FP8 GEMM there
// is refused, never emulated. (FP8 casts, which any CUDA GPU converts, are
// not.) Checked once per device.
void require_fp8_tensor_cores(const at::Device& device);

// The refusal's line for a GPU of compute capability major * 10 + minor, or
// empty where it has FP8 tensor cores (8.9 and newer).
std::string fp8_tensor_core_refusal(int capability, const std::string& device);

}  // namespace accel::runtime
