// cuda_backend.h — LibTorch's CUDA backend, loaded only where it is used.
//
// accel-host and the tests link LibTorch's CPU library alone. Its CUDA
// library (libtorch_cuda.so, and with it cuBLAS, cuDNN, cuFFT, cuSPARSE,
// ...) costs about a quarter of a second at every process start, a third of
// accel-host's start-up on a machine without a GPU, where it is never
// used. It is loaded here instead, on demand, from the directory the CPU
// library was loaded from, and registers its kernels as it loads.
//
// When: before the first question to torch about CUDA (at::hasCUDA,
// torch::cuda::is_available, a CUDA tensor): torch caches its CUDA hooks at
// that first question, and a backend loaded after it would stay unseen.
// accel-host asks at the start of main; a test that wants a GPU asks in its
// SetUp. Thread-safety: any thread; the load happens once.
#pragma once

#include <string>

namespace accel::comm {

// Loads the backend when a CUDA device is visible (the CUDA runtime says so
// without torch) and this build's torch has one. Returns true when it is
// loaded (now or by an earlier call); false, with `why` set when given,
// where there is no device, the torch build has no CUDA, or the load failed
// (dlerror's line).
bool load_cuda_backend(std::string* why = nullptr);

}  // namespace accel::comm
