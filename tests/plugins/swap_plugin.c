/* The two files of the symlink-swap race test (tests/plugin/trust_test.cpp):
 * both are libaccel_swap.so, one trusted, one the test makes untrusted
 * (world-writable). The untrusted build (SWAP_UNTRUSTED) leaves a mark the
 * moment it is mapped — its ELF constructor creates the file named by
 * $ACCEL_TEST_UNTRUSTED_MARK — so the test sees whether its code ever ran,
 * whatever the loader did afterwards. */
#include <accel/accel.h>

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#if defined(SWAP_UNTRUSTED)
#define SWAP_DESCRIPTION "untrusted"
__attribute__((constructor)) static void mark_loaded(void) {
  const char* mark = getenv("ACCEL_TEST_UNTRUSTED_MARK");
  if (mark == NULL) return;
  const int fd = open(mark, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd >= 0) close(fd);
}
#else
#define SWAP_DESCRIPTION "trusted"
#endif

static AccelHooks kHooks = {
    .struct_size = sizeof(AccelHooks),
};

static const AccelPluginDescriptor kDescriptor = {
    .struct_size = sizeof(AccelPluginDescriptor),
    .abi_version = {ACCEL_ABI_VERSION_MAJOR, ACCEL_ABI_VERSION_MINOR},
    .name = PLUGIN_NAME,
    .version = "1.0.0",
    .description = SWAP_DESCRIPTION,
    .kind = ACCEL_PLUGIN_OBSERVER,
    .hooks = &kHooks,
};

ACCEL_PLUGIN_EXPORT AccelStatus accel_plugin_init_v1(const AccelHostInfo* info,
                                                     const AccelPluginDescriptor** descriptor) {
  (void)info;
  *descriptor = &kDescriptor;
  return ACCEL_OK;
}
