// tests/abi/abi_cxx17_test.cc — the ABI headers compile as C++17 with the
// same layout as in C (abi_checks.h), and the entry symbol keeps C linkage
// when a C++ plugin defines it.
#define ACCEL_TEST_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#include "abi_checks.h"

#include <cstdio>
#include <type_traits>

static_assert(std::is_standard_layout<AccelHooks>::value &&
                  std::is_trivial<AccelPluginDescriptor>::value,
              "ABI structs are plain C data in C++");
static_assert(std::is_same<decltype(&accel_plugin_init_v1),
                           AccelPluginInitV1Fn*>::value,
              "entry symbol matches its typedef");

int main() {
  int failures = accel_abi_runtime_checks();
  if (failures != 0) {
    std::fprintf(stderr, "abi_cxx17_test: %d check(s) failed\n", failures);
    return 1;
  }
  return 0;
}
