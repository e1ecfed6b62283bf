#!/usr/bin/env bash
# Packs a built checkout into one folder that runs on a GPU machine holding
# only the NVIDIA driver and a Python with the same torch (no apt, no pip, no
# network). Torch's own libraries, and the CUDA/NCCL libraries of its wheel,
# are taken from that machine's Python at run time (env.sh); everything else
# the binaries need travels: Boost, spdlog, fmt, yaml-cpp, and Open MPI
# relocated under the bundle through OPAL_PREFIX (mpirun and orted included,
# for several ranks on several GPUs).
#
# Usage: bench/gpu/bundle.sh [BUILD_DIR] [OUT_DIR] [TEST_BINARY...]
#   (defaults: build, .gpu-bundle, accel_runtime_services_tests: run.sh runs
#   its CUDA tests first)
# Then, on the GPU machine:  . OUT_DIR/env.sh && accel-host --device cuda ...
# or the whole benchmark:    bench/gpu/run.sh OUT_DIR
# About 25 MB. OUT_DIR/.. must be ignored by git when the tree travels
# (.gpu-bundle is, by .gitignore).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
out=${2:-$root/.gpu-bundle}
shift $(($# < 2 ? $# : 2))
tests=("$@"); [[ ${#tests[@]} -gt 0 ]] || tests=(accel_runtime_services_tests accel_host_tests)
[[ -x "$build/bin/accel-host" ]] || { echo "bundle.sh: $build/bin/accel-host is not built" >&2; exit 2; }
rm -rf "$out"; mkdir -p "$out/bin" "$out/lib/accel/plugins" "$out/syslib"
cp "$build/bin/accel-host" "$out/bin/"
for t in "${tests[@]}"; do [[ -x "$build/bin/$t" ]] && cp "$build/bin/$t" "$out/bin/"; done
cp "$build"/lib/accel/plugins/*.so "$out/lib/accel/plugins/"

# Every shared library outside torch's wheel and the C/C++ runtime that a
# binary or plugin needs.
for f in "$out"/bin/* "$out"/lib/accel/plugins/*.so; do ldd "$f"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -v -e '/site-packages/' -e '/libc\.so' -e '/libm\.so' -e '/libgcc_s' -e '/libstdc++' -e '/libpthread' \
          -e '/libdl\.so' -e '/librt\.so' -e '/libz\.so' -e '/libutil\.so' -e 'ld-linux' |
  while read -r lib; do cp -L "$lib" "$out/syslib/"; done

# Open MPI: launcher, components and help texts under a prefix that
# OPAL_PREFIX relocates.
prefix=$(ompi_info --path prefix --parsable | cut -d: -f3-)
pkglib=$(ompi_info --path pkglibdir --parsable | cut -d: -f3-)
pkgdata=$(ompi_info --path pkgdatadir --parsable | cut -d: -f3-)
mkdir -p "$out/ompi/bin" "$out/ompi/${pkglib#"$prefix"/}" "$out/ompi/${pkgdata#"$prefix"/}"
cp -r "$pkglib"/. "$out/ompi/${pkglib#"$prefix"/}/"
cp -r "$pkgdata"/. "$out/ompi/${pkgdata#"$prefix"/}/"
for tool in mpirun orterun orted; do
  [[ -e "$prefix/bin/$tool" ]] && cp -L "$prefix/bin/$tool" "$out/ompi/bin/"
done
# What the launcher and the components load beyond what the binaries did.
for f in "$out"/ompi/bin/* "$out/ompi/${pkglib#"$prefix"/}"/*.so; do ldd "$f" 2>/dev/null; done |
  awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -v -e '/libc\.so' -e '/libm\.so' -e '/libgcc_s' -e '/libstdc++' -e '/libpthread' -e '/libdl\.so' \
          -e '/librt\.so' -e '/libz\.so' -e '/libutil\.so' -e 'ld-linux' -e '/libcuda\.so' |
  while read -r lib; do [[ -e "$out/syslib/$(basename "$lib")" ]] || cp -L "$lib" "$out/syslib/"; done

cat >"$out/env.sh" <<ENV
# Source me on the GPU machine. TORCH_SITE may name the site-packages
# holding torch (default: python3's).
G=\$(cd "\$(dirname "\${BASH_SOURCE[0]}")" && pwd)
TP=\${TORCH_SITE:-\$(python3 -c 'import torch,os;print(os.path.dirname(os.path.dirname(torch.__file__)))')}
NV=\$TP/nvidia
export LD_LIBRARY_PATH=\$G/syslib:\$TP/torch/lib:\$NV/nccl/lib:\$NV/cu13/lib:\$NV/cudnn/lib:\$NV/cusparselt/lib:\$NV/nvshmem/lib:\${LD_LIBRARY_PATH:-}
export OPAL_PREFIX=\$G/ompi
export OMPI_MCA_mca_base_component_path=\$G/ompi/${pkglib#"$prefix"/}
export OMPI_MCA_ess_singleton_isolated=1   # one process without mpirun needs no daemon
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PATH=\$G/bin:\$G/ompi/bin:\$PATH
ENV
du -sh "$out"
