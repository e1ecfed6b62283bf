#!/usr/bin/env bash
# install_and_build_example.sh BUILD_DIR SOURCE_DIR [WORK_DIR]
#
# The SDK end to end, as a third party meets it: `cmake --install` the main
# build into a fresh prefix; configure and build examples/loss_spike_guard
# (C++ SDK) and examples/c_minimal (plain C) as their own CMake projects
# against it (find_package(Accel) through CMAKE_PREFIX_PATH), warnings as
# errors; install them; check that each .so exports only its entry symbol;
# then run the INSTALLED accel-host with both plugins and check what they
# report: the spike warning, the "spikes" metric, the step count at teardown.
# WORK_DIR (default BUILD_DIR/tests/sdk/install_test) is wiped first and kept
# afterwards for inspection.
set -euo pipefail

build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
work=${3:-$build/tests/sdk/install_test}
cmake=${CMAKE:-cmake}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# The host refuses plugin files and directories writable by other users.
umask 022
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix            # the installed Accel SDK + host
thirdparty=$work/thirdparty    # where the examples install themselves
plugins=$thirdparty/lib/accel/plugins

step() { echo "== $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

step "cmake --install $build --prefix $prefix"
"$cmake" --install "$build" --prefix "$prefix" > "$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "cmake --install of the main build"; }
for f in bin/accel-host include/accel/accel.h include/accel/plugin.h \
         include/accel/sdk/sdk.hpp lib/cmake/Accel/AccelConfig.cmake \
         lib/cmake/Accel/AccelConfigVersion.cmake \
         lib/cmake/Accel/AccelTargets.cmake lib/cmake/Accel/AccelPlugin.cmake; do
  [[ -e "$prefix/$f" ]] || fail "not installed: $f"
done

strict="-Wall -Wextra -Werror -pedantic"
for example in loss_spike_guard c_minimal; do
  step "build examples/$example out of tree against $prefix"
  "$cmake" -S "$src/examples/$example" -B "$work/build-$example" \
    -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX="$thirdparty" \
    -DCMAKE_CXX_FLAGS="$strict" -DCMAKE_C_FLAGS="$strict"
  "$cmake" --build "$work/build-$example" -j2
  "$cmake" --install "$work/build-$example"
done

step "exports"
bash "$here/check_exports.sh" "$plugins/libaccel_loss_spike_guard.so" \
  "$plugins/libaccel_c_minimal.so"

step "run the installed accel-host with both plugins"
set +e
"$prefix/bin/accel-host" --plugin-path "$plugins" \
  --plugin loss_spike_guard --plugin c_minimal \
  --steps 30 --lr 0.05 --threads 1 --log-every 10 \
  --loss_spike_guard.threshold 0.5 --loss_spike_guard.warmup 3 \
  --c_minimal.log_every 10 \
  --metrics-file "$work/metrics.jsonl" > "$work/run.log" 2>&1
rc=$?
set -e
cat "$work/run.log"
if grep -Eq "plugin loading is not available|unrecognised option '--(loss_spike_guard|c_minimal)\." "$work/run.log"; then
  fail "this accel-host cannot load plugins yet (host/plugin/ has not landed)"
fi
[[ $rc -eq 0 ]] || fail "accel-host exited with $rc"
grep -Eq "loss spike at step [0-9]+: [0-9.]+ \(mean " "$work/run.log" ||
  fail "no 'loss spike at step N' warning from loss_spike_guard"
grep -q "counted 30 training steps" "$work/run.log" ||
  fail "no step count from c_minimal's teardown"
grep -q "spikes" "$work/metrics.jsonl" "$work/run.log" ||
  fail "the metric 'spikes' appears neither in the metrics file nor the log"
step "ok"
