/* tests/abi/abi_c11_test.c — the ABI headers compile as strict C11 and keep
 * their pinned layout (abi_checks.h); a minimal plugin links as C. */
#define ACCEL_TEST_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#include "abi_checks.h"

int main(void) {
  int failures = accel_abi_runtime_checks();
  if (failures != 0) {
    fprintf(stderr, "abi_c11_test: %d check(s) failed\n", failures);
    return 1;
  }
  return 0;
}
