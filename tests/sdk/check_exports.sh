#!/usr/bin/env bash
# check_exports.sh PLUGIN.so... — each plugin honours the loading rules of
# docs/abi.md §8: its dynamic symbol table defines exactly the entry symbol
# accel_plugin_init_v1 (hidden visibility + the version script of
# accel_add_plugin), and it needs no library of the host (no LibTorch, MPI,
# Boost, spdlog: everything of the host reaches it through the services table).
set -euo pipefail

allowed_needed='^(libc\.so|libm\.so|libstdc\+\+\.so|libgcc_s\.so|ld-linux)'
# A sanitizer build (make test-sanitize) links every object, plugins too,
# with the sanitizer runtimes: ACCEL_SANITIZE_RUNTIMES=1 allows them.
if [[ "${ACCEL_SANITIZE_RUNTIMES:-0}" == 1 ]]; then
  allowed_needed='^(libc\.so|libm\.so|libstdc\+\+\.so|libgcc_s\.so|ld-linux|libasan\.so|libubsan\.so|libtsan\.so)'
fi
status=0
for so in "$@"; do
  exports=$(nm -D --defined-only "$so" | awk '{print $NF}' | sort | tr '\n' ' ')
  if [[ "$exports" != "accel_plugin_init_v1 " ]]; then
    echo "FAIL $so exports: $exports(want only accel_plugin_init_v1)"
    status=1
  else
    echo "ok   $so exports only accel_plugin_init_v1"
  fi
  while read -r needed; do
    if [[ ! "$needed" =~ $allowed_needed ]]; then
      echo "FAIL $so needs $needed (a plugin links nothing of the host)"
      status=1
    fi
  done < <(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
done
exit "$status"
