// accel-host binds every symbol when it loads, not on first call.
//
// Why: Open MPI's progress thread makes its first call through the PLT
// (libevent's event_base_loop) while MPI_Init, on the main thread, is still
// opening and closing Open MPI's components. A lazy binding walks the
// loader's symbol scopes; one racing a dlopen/dlclose there died with
// SIGSEGV inside ld.so (_dl_runtime_resolve -> _dl_fixup -> do_lookup_x),
// rarely, under load (docs/benchmarks.md, "The SIGSEGV in ld.so"). With
// LD_BIND_NOW every library's PLT is resolved while it loads, under the
// loader's lock, so no thread ever resolves a symbol lazily.
//
// LD_BIND_NOW is read only when a process starts, so accel-host starts
// itself once more with it set. This runs from .preinit_array: before any
// library's constructor (LibTorch's registrations take ~0.4 s), so the second
// start costs only the loader's own work (~2 ms of relocation). It is skipped
// when LD_BIND_NOW is already non-empty, for set-uid execution (the loader
// drops LD_* there, so it would loop), and when /proc/self/exe cannot be run
// (then the process goes on, lazily bound, as before). The second start
// takes LD_BIND_NOW back out of its environment, so the programs it starts
// load as they would have.
#include <limits.h>
#include <sys/auxv.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace {

constexpr char kBindNow[] = "LD_BIND_NOW=";
// Marks the second start: its LD_BIND_NOW is ours, not the user's.
constexpr char kStartedAgain[] = "ACCEL_STARTED_BOUND_NOW=";

bool has_prefix(const char* entry, const char* prefix) { return std::strncmp(entry, prefix, std::strlen(prefix)) == 0; }

// The second start: the loader has read LD_BIND_NOW (it keeps binding
// whatever this process dlopens at load), so both variables leave the
// environment before anything runs: the programs accel-host starts (srun,
// mpirun, a rank) must load as the user's environment says. Slurm's srun,
// for one, dlopens plugins that only resolve lazily. The array is edited in
// place: environ is this same array once libc starts.
void forget_our_variables(char** envp) {
  char** out = envp;
  for (char** entry = envp; *entry != nullptr; ++entry) {
    if (!has_prefix(*entry, kBindNow) && !has_prefix(*entry, kStartedAgain)) *out++ = *entry;
  }
  *out = nullptr;
}

void start_again_bound_now(int /*argc*/, char** argv, char** envp) {
  if (envp == nullptr || argv == nullptr || getauxval(AT_SECURE) != 0) return;
  for (char** entry = envp; *entry != nullptr; ++entry) {
    if (has_prefix(*entry, kStartedAgain)) return forget_our_variables(envp);
  }
  size_t count = 0;
  for (char** entry = envp; *entry != nullptr; ++entry) {
    // The loader binds now for any non-empty value: the user's own choice
    // stays (and reaches what accel-host starts). An empty one is replaced.
    if (has_prefix(*entry, kBindNow) && (*entry)[sizeof(kBindNow) - 1] != '\0') return;
    ++count;
  }
  char** bound_env = static_cast<char**>(std::malloc((count + 3) * sizeof(char*)));
  if (bound_env == nullptr) return;
  size_t kept = 0;
  for (char** entry = envp; *entry != nullptr; ++entry) {
    if (!has_prefix(*entry, kBindNow)) bound_env[kept++] = *entry;
  }
  static char bind_now[] = "LD_BIND_NOW=1";
  static char started_again[] = "ACCEL_STARTED_BOUND_NOW=1";
  bound_env[kept++] = bind_now;
  bound_env[kept++] = started_again;
  bound_env[kept] = nullptr;
  // The file's own path, not /proc/self/exe: the kernel names the process
  // after the path's last part, and ps, pkill and top must still see
  // "accel-host", not "exe".
  char self[PATH_MAX];
  const ssize_t length = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (length > 0) {
    self[length] = '\0';
    execve(self, argv, bound_env);
  }
  execve("/proc/self/exe", argv, bound_env);
  std::free(bound_env);  // exec failed: go on as started
}

}  // namespace

// glibc calls the executable's .preinit_array entries with (argc, argv, envp)
// before it runs any shared library's initializers.
__attribute__((section(".preinit_array"), used)) static void (*const accel_bind_now_at_start)(int, char**, char**) =
    &start_again_bound_now;
