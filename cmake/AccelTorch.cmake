# Finds LibTorch inside the pinned torch wheel (.venv, made by
# scripts/install-deps.sh) and exposes it as the target accel::torch.
#
# Why not just `Torch_DIR`: the wheel is a CUDA build whose CMake config also
# drags CUDA libraries from /usr/local/cuda into the link line. The host must
# load exactly one CUDA runtime and one libnccl — the ones torch itself loads
# from the wheel's nvidia/ packages — so we link only torch's own libraries and
# let them pull their CUDA dependencies through their RUNPATH (docs/dependencies.md).

set(ACCEL_PYTHON "${CMAKE_SOURCE_DIR}/.venv/bin/python" CACHE FILEPATH
    "Python interpreter of the venv holding the pinned torch wheel")
if(NOT EXISTS "${ACCEL_PYTHON}")
  message(FATAL_ERROR "accel: ${ACCEL_PYTHON} not found; run scripts/install-deps.sh (make deps) first")
endif()

execute_process(
  COMMAND "${ACCEL_PYTHON}" -c "import torch, os; print(os.path.dirname(torch.__file__))"
  OUTPUT_VARIABLE ACCEL_TORCH_DIR OUTPUT_STRIP_TRAILING_WHITESPACE
  RESULT_VARIABLE _torch_rc)
if(NOT _torch_rc EQUAL 0)
  message(FATAL_ERROR "accel: ${ACCEL_PYTHON} cannot import torch")
endif()

set(ACCEL_TORCH_LIB_DIR "${ACCEL_TORCH_DIR}/lib")
find_library(ACCEL_TORCH_CPU_LIB torch_cpu PATHS "${ACCEL_TORCH_LIB_DIR}" NO_DEFAULT_PATH REQUIRED)
find_library(ACCEL_C10_LIB c10 PATHS "${ACCEL_TORCH_LIB_DIR}" NO_DEFAULT_PATH REQUIRED)
# Present in CUDA builds of the wheel. Not linked: libtorch_cuda.so and the
# CUDA libraries it needs (cuBLAS, cuDNN, cuFFT, ...) cost about 0.25 s at
# every process start, and a process loads it only where a CUDA device is
# visible (host/comm/cuda_backend.h, which finds it beside libtorch_cpu.so).
# Neither is libtorch.so, a shim that needs both.
find_library(ACCEL_TORCH_CUDA_LIB torch_cuda PATHS "${ACCEL_TORCH_LIB_DIR}" NO_DEFAULT_PATH)

add_library(accel_torch INTERFACE)
add_library(accel::torch ALIAS accel_torch)
target_include_directories(accel_torch SYSTEM INTERFACE
  "${ACCEL_TORCH_DIR}/include"
  "${ACCEL_TORCH_DIR}/include/torch/csrc/api/include")
# The wheel is built with the C++11 ABI, like Debian's Boost and spdlog.
target_compile_definitions(accel_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=1)
set(_torch_libs ${ACCEL_TORCH_CPU_LIB} ${ACCEL_C10_LIB})
if(ACCEL_TORCH_CUDA_LIB)
  set(ACCEL_TORCH_HAS_CUDA ON)
endif()
# libstdc++ is named BEFORE the torch libraries on purpose: torch exports
# its own copies of std::filesystem (remove_all, ...), and whichever library
# comes first in NEEDED wins symbol resolution. Torch's copy of remove_all
# jumps through a null pointer when called from our code (found by
# tests/host/trainer_checkpoint_test.cpp); with libstdc++ first, the standard
# library resolves to itself. tests/host/link_order_test.cpp pins this.
target_link_libraries(accel_torch INTERFACE "-Wl,--no-as-needed" stdc++ ${_torch_libs} "-Wl,--as-needed")
# RUNPATH to the wheel: the binaries find libtorch where the venv keeps it.
target_link_options(accel_torch INTERFACE "-Wl,-rpath,${ACCEL_TORCH_LIB_DIR}")
message(STATUS "accel: LibTorch from ${ACCEL_TORCH_DIR} (CUDA build: ${ACCEL_TORCH_HAS_CUDA})")
