// cuda_backend.cpp — see cuda_backend.h.
#include "host/comm/cuda_backend.h"

#include <dlfcn.h>
#include <link.h>

#include <cstring>
#include <mutex>

#include "host/comm/nccl_communicator.h"

namespace accel::comm {
namespace {

// The directory of the loaded libtorch_cpu.so (with its trailing '/'), or
// empty when it is not loaded.
std::string torch_library_dir() {
  std::string dir;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        const char* name = info->dlpi_name;
        const char* slash = name != nullptr ? std::strrchr(name, '/') : nullptr;
        if (slash == nullptr || std::strncmp(slash + 1, "libtorch_cpu.so", 15) != 0) return 0;
        *static_cast<std::string*>(out) = std::string(name, static_cast<size_t>(slash - name + 1));
        return 1;
      },
      &dir);
  return dir;
}

struct LoadResult {
  bool loaded = false;
  std::string why;
};

LoadResult load_once() {
#if defined(ACCEL_TORCH_HAS_CUDA)
  std::string why;
  if (cuda_device_count(&why) <= 0) return {false, why};
  const std::string dir = torch_library_dir();
  if (dir.empty()) return {false, "libtorch_cpu.so is not loaded in this process"};
  const std::string path = dir + "libtorch_cuda.so";
  if (dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    const char* error = dlerror();
    return {false, "cannot load " + path + ": " + (error != nullptr ? error : "unknown error")};
  }
  return {true, {}};
#else
  return {false, "this build's LibTorch has no CUDA"};
#endif
}

}  // namespace

bool load_cuda_backend(std::string* why) {
  static std::once_flag once;
  static LoadResult result;
  std::call_once(once, [] { result = load_once(); });
  if (!result.loaded && why != nullptr) *why = result.why;
  return result.loaded;
}

}  // namespace accel::comm
