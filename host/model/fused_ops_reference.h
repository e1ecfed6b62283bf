// fused_ops_reference.h — the fused kernels of
// host/model/cuda/fused_ops_kernel.h run on the CPU: the same argument
// structs and the same per-element arithmetic (fused_ops_math.h), rows one
// after another. host/model/fused_ops.cpp calls these for CPU tensors, so
// the CPU tests drive the whole fused path (arguments, autograd, the
// partial sums) that a CUDA device runs with the kernels. The model itself
// keeps ATen's composition on the CPU, whose bits the parity tests pin.
// Thread-safety: any thread; pointers are host memory.
#pragma once

#include "host/model/cuda/fused_ops_kernel.h"

namespace accel::model::fused_reference {

void norm_forward(const runtime::cuda_kernels::NormForward& args);
void norm_backward(const runtime::cuda_kernels::NormBackward& args);
void swiglu_forward(const runtime::cuda_kernels::SwigluForward& args);
void swiglu_backward(const runtime::cuda_kernels::SwigluBackward& args);
void rotary(const runtime::cuda_kernels::Rotary& args);
void cross_entropy(const runtime::cuda_kernels::CrossEntropy& args);

}  // namespace accel::model::fused_reference
